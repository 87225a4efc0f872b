package main

import "runtime"

func lockOSThread() { runtime.LockOSThread() }
