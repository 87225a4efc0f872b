package ok

import _ "fmt"
