// Package repocheck checks the repository rather than the program: that
// what the source says about the repository is true. Its tests run the
// checks on the tree they sit in.
//
// The first check is about citations. Comments cite the project's
// documents ("docs/protocol/netvsc.md §2.7"), and a citation is only worth
// something while the document exists and still has that section. So
// every cited path must name a file in the repository, and every section
// number must name a heading of that document.
package repocheck
