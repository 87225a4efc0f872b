package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/vmbusd/vmbusd/internal/buildinfo"
)

// flagSink stands in for a command's output when its --help runs: the
// command hands its flag set and synopsis over instead of printing them,
// so that the man pages list exactly the flags each command parses.
type flagSink struct {
	io.Writer
	fs       *pflag.FlagSet
	synopsis string
}

// newManCommand is the hidden `vmbusd man DIR`, which `make install` runs:
// one page per command (vmbusd.1, vmbusd-bind.1, ...) in section 1.
func newManCommand(ran *string) *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "write a man page per command into DIR",
		Hidden: true,
		// Errors are run's to print, with the exit code of their kind.
		Args: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, args []string) error {
			*ran = "man"
			if len(args) != 1 {
				return fmt.Errorf("%w: want one argument, the directory to write the pages into", errUsage)
			}
			return writeManPages(cmd.Root(), args[0])
		},
	}
}

// writeManPages fills each command of root with the flags its own flag
// set parses, then writes the pages into dir.
func writeManPages(root *cobra.Command, dir string) error {
	byName := map[string]command{}
	for _, c := range commands() {
		byName[c.name] = c
	}
	for _, cmd := range root.Commands() {
		c, ok := byName[cmd.Name()]
		if !ok {
			continue
		}
		sink := &flagSink{Writer: io.Discard}
		c.run(context.Background(), []string{"--help"}, sink)
		if sink.fs == nil {
			return fmt.Errorf("man: %s gave no flag set", c.name)
		}
		cmd.Use = sink.synopsis
		cmd.DisableFlagsInUseLine = true // the synopsis names them
		cmd.Long = c.summary + ".\n\n" + exitCodesHelp
		cmd.Flags().AddFlagSet(sink.fs)
	}
	root.Use = "vmbusd [--version] COMMAND [ARGS...]"
	root.DisableFlagsInUseLine = true
	root.InitDefaultVersionFlag()
	root.DisableAutoGenTag = true
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("man: %w", err)
	}
	bi := buildinfo.Get()
	header := &doc.GenManHeader{Title: "VMBUSD", Section: "1", Source: "vmbusd " + bi.Version, Manual: "vmbusd manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("man: %w", err)
	}
	return nil
}
