// Package config reads vmbusd's configuration file (TOML) into typed values
// (enums, netip.Prefix, time.Duration) and validates it once: invalid files
// are refused with the line, the key and the reason, and nothing is applied
// from a file that does not validate. Limits that belong to a driver are
// the driver's: a NIC's MTU and queue count are checked by
// netvsc.Config.Validate, not by copies of its constants.
//
// What can only be checked against the running system (a device's
// identity, whether a network namespace exists) is the daemon's to check;
// this package reads no sysfs.
package config
