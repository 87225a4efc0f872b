// Package protoerr is the error the netvsc wire decoders (packages nvsp and
// rndis) and the guest driver (package netvsc) return when a peer's message
// breaks the NVSP, RNDIS or NDIS rules: an *Error whose Kind names the check
// that failed, so callers can count "protocol violations by check" under
// labels that stay the same whichever layer found the violation.
package protoerr
