//go:build tools

package main

import (
	_ "github.com/99designs/gqlgen"
	_ "github.com/Khan/genqlient"
)
