// Command hello prints "hello": the program TestBinaryOutlivesItsBuilder
// builds.
package main

import "fmt"

func main() { fmt.Println("hello") }
