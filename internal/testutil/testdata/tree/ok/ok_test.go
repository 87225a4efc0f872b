package ok

import _ "github.com/vmbusd/vmbusd/internal/testutil"
