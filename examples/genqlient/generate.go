package main

//go:generate go run github.com/Khan/genqlient genqlient.yaml
