package prod

import _ "github.com/vmbusd/vmbusd/internal/testutil"
