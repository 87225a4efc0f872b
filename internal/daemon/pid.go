package daemon

import "os"

func pidSelf() int { return os.Getpid() }
