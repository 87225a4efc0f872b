package wireprod

import _ "github.com/vmbusd/vmbusd/internal/wiretest"
