//go:build tools

package main

import _ "github.com/99designs/gqlgen"
