package main

import "errors"

// runBench is replaced by the bench command's implementation.
func runBench(args []string) error { return errors.New("bench: not built yet") }
