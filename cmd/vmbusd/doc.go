// Command vmbusd is a user-space driver for Hyper-V VMBus devices handed to
// user space by Linux's uio_hv_generic, with a simulated Hyper-V host for
// machines that have none.
package main
