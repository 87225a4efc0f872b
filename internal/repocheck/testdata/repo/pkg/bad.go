package pkg

// Bad cites a document that is not in the repository (docs/missing.md),
// a section the guide lacks (docs/guide.md §1.3), and a range whose end
// is missing (docs/guide.md §1.2-1.4).
const Bad = 1

// Unanchored cites §1 with no document before it.
const Unanchored = 2

/*
Block comments count too: nope.md
*/
const Block = 3

// Strings are not comments.
const S = "docs/missing.md §5"
