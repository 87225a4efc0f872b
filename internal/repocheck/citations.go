package repocheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// What is scanned, and how a citation is read:
//
//   - Go files: every comment. A comment group (consecutive // lines, or
//     one /* */ comment) is one block. String literals are not read.
//   - Shell scripts (a .sh name, or a "#!" first line naming a shell):
//     every line whose first non-blank character is '#'. Consecutive such
//     lines are one block.
//   - Markdown files under docs/: each paragraph (lines between blank
//     lines, outside fenced code), list item and table row is one block.
//
// Directories named testdata or vendor, and those whose names start with
// a dot, are skipped.
//
// A document citation is a path ending in ".md" ("docs/uio-contract.md",
// "README.md"). It must name a regular file, looked up first relative to
// the citing file's directory and then relative to the repository root. A
// path that is part of a URL ("https://...") or qualified by an upstream
// repository with a colon ("microsoft/openvmm:Guide/src/SUMMARY.md") cites
// something outside the project and is not checked.
//
// A section citation is "§N" or "§N.M..."; a range cites both ends, as in
// docs/protocol/vmbus-ring.md §1.4-1.5. It belongs to the nearest
// document citation before it in the same block, and that document must
// have a Markdown heading with that number ("## 2. NVSP", "### 2.7 Send
// path"). In a Markdown document, a section citation with no document
// before it in its block means the document itself. In code it is a
// problem: the reader cannot tell which document is meant.
const markdownDir = "docs"

var (
	// docRE matches a path ending in .md; the group is the path. The
	// character before it must not belong to a path, so that a path with
	// directories is one citation, not its last element.
	docRE = regexp.MustCompile(`(?:^|[^\w./:-])((?:[\w.-]+/)*[\w-][\w.-]*\.md)\b`)
	// secRE matches a section citation, with an optional range end.
	secRE = regexp.MustCompile(`§\s?(\d+(?:\.\d+)*)(?:\s?[-–]\s?(\d+(?:\.\d+)*))?`)
	// headingRE reads a heading's number: "## 2.", "### 2.7 Send path".
	headingRE = regexp.MustCompile(`^#{1,6}\s+(\d+(?:\.\d+)*)\.?(?:\s|$)`)
	// linkRE matches a Markdown link; the group is its target.
	linkRE = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]*)\)`)
	// itemRE matches the first line of a Markdown list item or a table row.
	itemRE = regexp.MustCompile(`^\s*(?:[-*+]|\d+\.|\|)\s`)
	// shebangRE recognises a shell script's first line.
	shebangRE = regexp.MustCompile(`^#!.*\b(?:ba|da|z|k)?sh\b`)
)

// Citation is one citation found in the repository: a document, or a
// section of the document cited before it.
type Citation struct {
	File string // slash-separated, relative to the repository root
	Line int    // 1-based
	// Doc is the document as written ("docs/protocol/netvsc.md"). For a
	// section citation it is the document the section belongs to: the
	// nearest one before it in the block, the citing file itself for a
	// Markdown document, or "" when there is none.
	Doc string
	// Sections is empty for a document citation; otherwise the section
	// numbers cited, one or (for a range) two.
	Sections []string
	Text     string // as written: the path, or the section sign and number(s)
}

// Problem is a citation that does not resolve inside the repository.
type Problem struct {
	Citation
	Why string
}

func (p Problem) String() string {
	cite := p.Text
	if len(p.Sections) > 0 && p.Doc != "" && p.Doc != p.File {
		cite = p.Doc + " " + p.Text
	}
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, cite, p.Why)
}

// CheckCitations returns every citation in the repository at root that
// does not resolve, sorted by file and line.
func CheckCitations(root string) ([]Problem, error) {
	cites, err := Citations(root)
	if err != nil {
		return nil, err
	}
	r := resolver{root: root, headings: map[string]map[string]bool{}}
	var probs []Problem
	for _, c := range cites {
		if len(c.Sections) == 0 {
			if r.resolve(c.File, c.Doc) == "" {
				probs = append(probs, Problem{c, "no such file in the repository"})
			}
			continue
		}
		if c.Doc == "" {
			probs = append(probs, Problem{c, "section cites no document (name the document before the §)"})
			continue
		}
		doc := r.resolve(c.File, c.Doc)
		if doc == "" {
			continue // reported once, at the document citation
		}
		for _, s := range c.Sections {
			if !r.hasHeading(doc, s) {
				probs = append(probs, Problem{c, fmt.Sprintf("%s has no heading numbered %s", doc, s)})
			}
		}
	}
	return slices.CompactFunc(probs, func(a, b Problem) bool {
		return a.File == b.File && a.Line == b.Line && a.Text == b.Text && a.Why == b.Why
	}), nil
}

// Citations returns every citation in the repository at root, sorted by
// file and line (and by position within a line).
func Citations(root string) ([]Citation, error) {
	var cites []Citation
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		var blocks []block
		switch {
		case strings.HasSuffix(name, ".go"):
			blocks, err = goBlocks(path)
		case strings.HasSuffix(name, ".md") && strings.HasPrefix(rel, markdownDir+"/"):
			blocks, err = markdownBlocks(path)
		default:
			blocks, err = shellBlocks(path, rel)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		self := ""
		if strings.HasSuffix(name, ".md") {
			self = rel
		}
		for _, b := range blocks {
			cites = append(cites, b.citations(rel, self)...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("repocheck: citations: %w", err)
	}
	return cites, nil
}

// block is a run of comment or paragraph text; lines[i] is on line
// first+i of its file.
type block struct {
	first int
	lines []string
}

func goBlocks(path string) ([]block, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var blocks []block
	for _, g := range f.Comments {
		b := block{first: fset.Position(g.Pos()).Line}
		for _, cm := range g.List {
			line := fset.Position(cm.Pos()).Line
			for i, l := range strings.Split(cm.Text, "\n") {
				for len(b.lines) < line-b.first+i {
					b.lines = append(b.lines, "")
				}
				b.lines = append(b.lines, l)
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

func shellBlocks(path, rel string) ([]block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	if !strings.HasSuffix(rel, ".sh") && !shebangRE.Match(first) {
		return nil, nil
	}
	var blocks []block
	var b block
	flush := func() {
		if len(b.lines) > 0 {
			blocks = append(blocks, b)
		}
		b = block{}
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		t := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(t, "#") || (n == 1 && strings.HasPrefix(t, "#!")) {
			flush()
			continue
		}
		if len(b.lines) == 0 {
			b.first = n
		}
		b.lines = append(b.lines, t)
	}
	flush()
	return blocks, sc.Err()
}

func markdownBlocks(path string) ([]block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var blocks []block
	var b block
	flush := func() {
		if len(b.lines) > 0 {
			blocks = append(blocks, b)
		}
		b = block{}
	}
	fence := false
	for i, l := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") {
			fence = !fence
			flush()
			continue
		}
		if fence || t == "" {
			flush()
			continue
		}
		if itemRE.MatchString(l) {
			flush() // a list item or table row is a block of its own
		}
		if len(b.lines) == 0 {
			b.first = i + 1
		}
		// A link cites its target; its text is only words.
		b.lines = append(b.lines, linkRE.ReplaceAllString(l, "$1"))
	}
	flush()
	return blocks, nil
}

// citations lists the citations of one block of file rel. self, when not
// empty, is the document a section citation with no document before it
// refers to.
func (b block) citations(rel, self string) []Citation {
	var out []Citation
	doc := self
	for i, line := range b.lines {
		type hit struct {
			at int
			c  Citation
		}
		var hits []hit
		for _, m := range docRE.FindAllStringSubmatchIndex(line, -1) {
			s, e := m[2], m[3]
			if upstream(line, s) {
				continue
			}
			hits = append(hits, hit{s, Citation{Doc: line[s:e], Text: line[s:e]}})
		}
		for _, m := range secRE.FindAllStringSubmatchIndex(line, -1) {
			c := Citation{Sections: []string{line[m[2]:m[3]]}, Text: line[m[0]:m[1]]}
			if m[4] >= 0 {
				c.Sections = append(c.Sections, line[m[4]:m[5]])
			}
			hits = append(hits, hit{m[0], c})
		}
		slices.SortFunc(hits, func(x, y hit) int { return x.at - y.at })
		for _, h := range hits {
			c := h.c
			c.File, c.Line = rel, b.first+i
			if len(c.Sections) == 0 {
				doc = c.Doc
			} else {
				c.Doc = doc
			}
			out = append(out, c)
		}
	}
	return out
}

// upstream reports whether the .md path starting at s in line is part of
// a URL or qualified by an upstream repository ("owner/repo:path.md").
func upstream(line string, s int) bool {
	word := line[strings.LastIndexAny(line[:s], " \t`'\"(<[")+1 : s]
	return strings.Contains(word, "://") || strings.HasSuffix(word, ":")
}

// resolver finds cited documents and their headings.
type resolver struct {
	root     string
	headings map[string]map[string]bool // document -> heading numbers
}

// resolve returns the path, relative to the root, of document cited by
// file rel, or "" when there is no such regular file in the repository.
func (r *resolver) resolve(rel, cited string) string {
	for _, cand := range []string{path(filepath.Join(filepath.Dir(rel), cited)), path(cited)} {
		if cand == ".." || strings.HasPrefix(cand, "../") {
			continue // outside the repository
		}
		if st, err := os.Stat(filepath.Join(r.root, filepath.FromSlash(cand))); err == nil && st.Mode().IsRegular() {
			return cand
		}
	}
	return ""
}

func path(p string) string { return filepath.ToSlash(filepath.Clean(p)) }

// hasHeading reports whether document doc has a heading numbered num.
func (r *resolver) hasHeading(doc, num string) bool {
	hs, ok := r.headings[doc]
	if !ok {
		hs = map[string]bool{}
		if data, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(doc))); err == nil {
			for h := range Headings(data) {
				hs[h] = true
			}
		}
		r.headings[doc] = hs
	}
	return hs[num]
}

// Headings yields the numbers of a Markdown document's numbered headings
// ("2", "2.7", ...), outside fenced code, in document order.
func Headings(md []byte) iter.Seq[string] {
	return func(yield func(string) bool) {
		fence := false
		for _, l := range strings.Split(string(md), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				fence = !fence
				continue
			}
			if fence {
				continue
			}
			if m := headingRE.FindStringSubmatch(l); m != nil {
				if !yield(m[1]) {
					return
				}
			}
		}
	}
}
