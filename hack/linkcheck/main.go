// Command linkcheck checks, without the network, that what isochron's documents point at
// exists (make docs-check):
//
//   - Markdown links and images, [text](target) and [ref]: target, whose target is not a
//     URL: the file or folder exists, relative to the document, and a #anchor names a
//     heading of the Markdown file it points into (GitHub's slugs), or of the document
//     itself for a bare #anchor;
//   - citations of a Markdown file in the text, `docs/placement.md`, placement.md#tests or
//     probes.md, "What a probe trusts": the file exists (relative to the document, else
//     to the repository) and so does the anchor, or a heading that begins with the
//     section named;
//   - repository paths in backticks, `config/samples/rt-net.yaml`: they exist (for a Go
//     symbol, `internal/slo.Judge`, its package's folder);
//   - the runbook_url annotations of config/prometheus (rules and promtool tests): each
//     starts with -runbook-base, and the rest is a document and heading that exist.
//
// It reads README.md, CHANGELOG.md, DEVELOPERS.md, docs/*.md and docs/dev/*.md, skips fenced code blocks
// and prints each broken target as file:line, then exits 1.
//
//	go run ./hack/linkcheck -runbook-base https://github.com/isochron/isochron/blob/main/
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// The documents checked, relative to the repository.
var documents = []string{"README.md", "CHANGELOG.md", "DEVELOPERS.md", "docs/*.md", "docs/dev/*.md"}

// Where the runbook_url annotations are.
var rulesGlobs = []string{"config/prometheus/*.yaml", "config/prometheus/tests/*.yaml"}

// The repository's top-level folders: a path in backticks that starts with one is a
// path of this repository.
var topFolders = []string{"api", "build", "cmd", "config", "controllers", "docs", "e2e", "hack", "internal", "probes", "test"}

var (
	// [text](target) and ![alt](target); the target ends at a space (a title follows) or ")".
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// [ref]: target
	refDefinition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	codeSpan      = regexp.MustCompile("`([^`]+)`")
	url           = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://\S+`)
	// A Markdown file named in the text, with an optional anchor.
	// A Markdown file named in the text, with an optional anchor or a section named after
	// it: docs/probes.md, "What a probe trusts".
	mdCitation = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+\.md)(#[A-Za-z0-9_-]+)?` + "`?" + `(?:,\s+"([^"]+)")?`)
	// A repository path in backticks: the whole code span.
	repoPath = regexp.MustCompile(`^(?:` + strings.Join(topFolders, "|") + `)/[A-Za-z0-9_./-]*(?:#[A-Za-z0-9_-]+)?$`)
	// A Go package's symbol, internal/slo.Judge: the package's folder is what must exist.
	goSymbol   = regexp.MustCompile(`^(.*/[a-z0-9_]+)\.[A-Z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?$`)
	runbookURL = regexp.MustCompile(`^\s*runbook_url:\s*["']?([^"'\s]+)["']?\s*$`)
	fence      = regexp.MustCompile("^\\s{0,3}(```+|~~~+)")
	atxHeading = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
	mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

func main() {
	root := flag.String("root", ".", "the repository")
	runbookBase := flag.String("runbook-base", "", "the base every runbook_url must start with, e.g. https://github.com/isochron/isochron/blob/main/")
	flag.Parse()

	c := &checker{root: *root, anchors: map[string]map[string]bool{}}
	docs, err := globAll(*root, documents)
	if err != nil {
		fail(err)
	}
	for _, d := range docs {
		if err := c.document(d); err != nil {
			fail(err)
		}
	}
	rules, err := globAll(*root, rulesGlobs)
	if err != nil {
		fail(err)
	}
	for _, r := range rules {
		if err := c.rules(r, *runbookBase); err != nil {
			fail(err)
		}
	}
	for _, p := range c.problems {
		fmt.Println(p)
	}
	if len(c.problems) > 0 {
		fmt.Fprintf(os.Stderr, "linkcheck: %d broken links in %d documents and %d rule files\n", len(c.problems), len(docs), len(rules))
		os.Exit(1)
	}
	fmt.Printf("linkcheck: %d documents and %d rule files, no broken links\n", len(docs), len(rules))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "linkcheck:", err)
	os.Exit(2)
}

// globAll returns the files the patterns match, relative to root, sorted.
func globAll(root string, patterns []string) ([]string, error) {
	var out []string
	for _, p := range patterns {
		m, err := filepath.Glob(filepath.Join(root, p))
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				return nil, err
			}
			out = append(out, filepath.ToSlash(rel))
		}
	}
	sort.Strings(out)
	return out, nil
}

type checker struct {
	root     string
	anchors  map[string]map[string]bool // by repository path of a Markdown file
	problems []string
}

func (c *checker) report(file string, line int, target, why string) {
	c.problems = append(c.problems, fmt.Sprintf("%s:%d: %q: %s", file, line, target, why))
}

// lines returns the file's lines outside fenced code blocks, by line number.
func (c *checker) lines(file string) (map[int]string, error) {
	f, err := os.Open(filepath.Join(c.root, file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[int]string{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	var open string // the fence that opened the current code block
	for n := 1; s.Scan(); n++ {
		l := s.Text()
		if m := fence.FindStringSubmatch(l); m != nil {
			switch {
			case open == "":
				open = m[1]
			case m[1][0] == open[0] && len(m[1]) >= len(open):
				open = ""
			}
			continue
		}
		if open == "" {
			out[n] = l
		}
	}
	return out, s.Err()
}

func sortedLines(ls map[int]string) []int {
	ns := make([]int, 0, len(ls))
	for n := range ls {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	return ns
}

// document checks one Markdown document.
func (c *checker) document(file string) error {
	ls, err := c.lines(file)
	if err != nil {
		return err
	}
	dir := path.Dir(file)
	for _, n := range sortedLines(ls) {
		l := ls[n]
		// Links, but not what only looks like one inside a code span (a regular
		// expression's `[a-z]([a-z0-9])`): the text keeps those.
		var outside strings.Builder
		last := 0
		for _, m := range inlineLink.FindAllStringSubmatchIndex(l, -1) {
			if inCodeSpan(l, m[0]) {
				continue
			}
			c.link(file, n, dir, l[m[2]:m[3]])
			outside.WriteString(l[last:m[0]])
			last = m[1]
		}
		outside.WriteString(l[last:])
		if m := refDefinition.FindStringSubmatch(l); m != nil {
			c.link(file, n, dir, m[1])
		}
		// Citations: the text without links' targets and URLs.
		text := url.ReplaceAllString(outside.String(), "")
		if refDefinition.MatchString(l) {
			text = ""
		}
		for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
			p := strings.TrimRight(m[1], ".,:;")
			if !repoPath.MatchString(p) || strings.Contains(p, "..") || mdCitation.MatchString(p) {
				continue // a Markdown file is checked as a citation, below
			}
			if !c.exists(p) {
				p = goSymbol.ReplaceAllString(p, "$1")
			}
			c.citation(file, n, "", p, "")
		}
		for _, m := range mdCitation.FindAllStringSubmatch(text, -1) {
			c.citation(file, n, dir, m[1]+m[2], m[3])
		}
	}
	return nil
}

// inCodeSpan reports whether position i of line l is inside a code span.
func inCodeSpan(l string, i int) bool {
	for _, span := range codeSpan.FindAllStringIndex(l, -1) {
		if span[0] < i && i < span[1] {
			return true
		}
	}
	return false
}

// link checks a Markdown link's target, relative to dir.
func (c *checker) link(file string, line int, dir, target string) {
	if url.MatchString(target) || strings.HasPrefix(target, "mailto:") {
		return
	}
	p, anchor, _ := strings.Cut(target, "#")
	if p == "" {
		p = file
	} else {
		p = path.Clean(path.Join(dir, p))
	}
	c.target(file, line, target, p, anchor)
}

// citation checks a path named in the text: relative to dir, else to the repository;
// and the section a Markdown file's citation names, if any.
func (c *checker) citation(file string, line int, dir, target, section string) {
	p, anchor, _ := strings.Cut(target, "#")
	p = path.Clean(p)
	if dir != "" && dir != "." {
		if rel := path.Join(dir, p); c.exists(rel) {
			p = rel
		}
	}
	if !c.target(file, line, target, p, anchor) || section == "" {
		return
	}
	as, err := c.anchorsOf(p)
	if err != nil {
		c.report(file, line, target, err.Error())
		return
	}
	// A section is cited by its heading or the heading's beginning: "Recalibration"
	// for "Recalibration: what probes measure corrects the model".
	want := slug(section)
	for a := range as {
		if strings.HasPrefix(a, want) {
			return
		}
	}
	c.report(file, line, fmt.Sprintf("%s, %q", target, section), "no heading that begins so in "+p)
}

func (c *checker) exists(p string) bool {
	_, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(p)))
	return err == nil
}

// target checks that the repository path p exists and, for a Markdown file, has the
// anchor; it reports whether p is a Markdown file that exists.
func (c *checker) target(file string, line int, target, p, anchor string) bool {
	if strings.HasPrefix(p, "../") || p == ".." {
		c.report(file, line, target, "points outside the repository")
		return false
	}
	if !c.exists(p) {
		c.report(file, line, target, "no such file or folder "+p)
		return false
	}
	if !strings.HasSuffix(p, ".md") {
		return false
	}
	if anchor == "" {
		return true
	}
	as, err := c.anchorsOf(p)
	if err != nil {
		c.report(file, line, target, err.Error())
		return false
	}
	if !as[strings.ToLower(anchor)] {
		c.report(file, line, target, fmt.Sprintf("no heading with anchor #%s in %s", anchor, p))
		return false
	}
	return true
}

// anchorsOf returns the anchors of a Markdown file's headings, as GitHub makes them, and
// of its HTML anchors.
func (c *checker) anchorsOf(p string) (map[string]bool, error) {
	if as, ok := c.anchors[p]; ok {
		return as, nil
	}
	ls, err := c.lines(p)
	if err != nil {
		return nil, err
	}
	as := map[string]bool{}
	seen := map[string]int{}
	for _, n := range sortedLines(ls) {
		l := ls[n]
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			as[strings.ToLower(m[1])] = true
		}
		if m := atxHeading.FindStringSubmatch(l); m != nil {
			s := slug(m[2])
			if k := seen[s]; k > 0 {
				as[fmt.Sprintf("%s-%d", s, k)] = true
			} else {
				as[s] = true
			}
			seen[s]++
		}
	}
	c.anchors[p] = as
	return as, nil
}

// slug is the anchor GitHub gives a heading: its text as rendered, lower case, without
// punctuation but for hyphens and underscores, spaces made hyphens. (A heading that
// repeats one gets -1, -2...: anchorsOf adds those.)
func slug(heading string) string {
	text := mdLinkText.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = strings.ReplaceAll(text, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ' || r == '-':
			b.WriteRune('-')
		case r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// rules checks the runbook_url annotations of a rules file.
func (c *checker) rules(file, base string) error {
	b, err := fs.ReadFile(os.DirFS(c.root), file)
	if err != nil {
		return err
	}
	for i, l := range strings.Split(string(b), "\n") {
		m := runbookURL.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		rest, ok := strings.CutPrefix(m[1], base)
		if !ok || url.MatchString(rest) {
			c.report(file, i+1, m[1], fmt.Sprintf("a runbook_url must start with %s and name a document of this repository", base))
			continue
		}
		if !strings.Contains(rest, "#") {
			c.report(file, i+1, m[1], "a runbook_url must name a heading: docs/operations.md#<alert>")
			continue
		}
		p, anchor, _ := strings.Cut(rest, "#")
		c.target(file, i+1, m[1], path.Clean(p), anchor)
	}
	return nil
}
