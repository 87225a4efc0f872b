package daemon

import (
	"strings"

	"github.com/vmbusd/vmbusd/internal/bind"
)

// Checks is `vmbusd check --json`: the bring-up checks under a root (no
// endpoint: read from the system, as the daemon's own start does).
type Checks struct {
	SchemaVersion int    `json:"schema_version"`
	Root          string `json:"root"`
	// OK: no check failed (warnings allowed); the command exits 1 otherwise.
	OK bool `json:"ok"`
	// Kernel is the running kernel's release.
	Kernel string `json:"kernel"`
	// Module is uio_hv_generic's state: loaded, builtin, available or
	// missing.
	Module       string         `json:"module"`
	Checks       []CheckItem    `json:"checks"`
	Devices      []CheckDevice  `json:"devices"`
	DefaultRoute []string       `json:"default_route"`
	Hugepages    []HugepagePool `json:"hugepages"`
	Hugetlbfs    []string       `json:"hugetlbfs"`
}

// CheckItem is one check's verdict.
type CheckItem struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// CheckDevice is one VMBus device as the checks saw it.
type CheckDevice struct {
	Instance       string `json:"instance"`
	Class          string `json:"class"`
	ClassName      string `json:"class_name"`
	Driver         string `json:"driver"`
	DriverOverride string `json:"driver_override"`
	Interface      string `json:"interface"`
	UIO            string `json:"uio"`
	Management     string `json:"management"`
}

// HugepagePool is one hugepage size's pool.
type HugepagePool struct {
	SizeKB int `json:"size_kb"`
	Total  int `json:"total"`
	Free   int `json:"free"`
}

// ChecksOf turns a bring-up report into its document: names and values
// snake_case ("default route" is default_route, FAIL is fail), every list
// present.
func ChecksOf(r bind.Report) Checks {
	c := Checks{SchemaVersion: SchemaVersion, Root: r.Root, OK: r.OK(), Kernel: r.Kernel, Module: r.Module,
		Checks: []CheckItem{}, Devices: []CheckDevice{}, DefaultRoute: nonNil(r.DefaultRoute),
		Hugepages: []HugepagePool{}, Hugetlbfs: nonNil(r.Hugetlbfs)}
	for _, i := range r.Items {
		c.Checks = append(c.Checks, CheckItem{Name: snake(i.Name), Status: strings.ToLower(i.Status.String()), Detail: i.Detail})
	}
	for _, d := range r.Devices {
		c.Devices = append(c.Devices, CheckDevice{Instance: d.Instance.String(), Class: d.Class.String(), ClassName: d.ClassName,
			Driver: d.Driver, DriverOverride: d.Override, Interface: d.Interface, UIO: d.UIO, Management: snake(d.Management)})
	}
	for _, h := range r.Hugepages {
		c.Hugepages = append(c.Hugepages, HugepagePool{SizeKB: h.SizeKB, Total: h.Total, Free: h.Free})
	}
	return c
}

func snake(s string) string { return strings.ReplaceAll(s, " ", "_") }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
