// Package csum is the Internet checksum (RFC 1071), shared by the guest's
// software segmentation and the simulated host's frame checks.
package csum
