// Package pkg cites documents that exist, with sections that exist:
// docs/guide.md §1.2, §2 and the range docs/guide.md §1-2; README.md
// resolves next to this file, docs/sub/notes.md §2 from the root.
package pkg

// Good is documented (docs/guide.md
// §1): the section belongs to the document on the line before.
const Good = 1
