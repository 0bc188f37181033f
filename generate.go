package main

// gqlgen's generate, then inorder's rewrite of its list marshalers (inorder/gen).
//go:generate go run ./inorder/gen
