package doccheck

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Block is a fenced code block of a Markdown file.
type Block struct {
	Lang string // the info string's first word: "sh", "go", "" ...
	Line int    // the line of its first content line, 1-based
	Text string // its content, without the fences
}

// Span is an inline code span of a Markdown file's prose (outside the fenced blocks),
// on one line or wrapped over several (a line break counts as a space).
type Span struct {
	Line int // the line it starts on
	Text string
}

// Link is a Markdown link's target: [text](target).
type Link struct {
	Line   int
	Target string
}

// Doc is a Markdown file split into what the checks read.
type Doc struct {
	Blocks   []Block
	Spans    []Span
	Links    []Link
	Headings []string // the headings' texts, in order
}

var fence = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^`\\s]*)")

// ParseMarkdown splits a Markdown text into its fenced blocks, its prose's inline code
// spans and links, and its headings. An unclosed fence runs to the end of the text, as
// in CommonMark.
func ParseMarkdown(text string) Doc {
	var d Doc
	lines := strings.Split(text, "\n")
	var para []string // the prose lines of the current paragraph
	paraStart := 0
	flush := func() {
		if len(para) > 0 {
			d.Spans = append(d.Spans, spans(para, paraStart)...)
			d.Links = append(d.Links, links(para, paraStart)...)
		}
		para = nil
	}
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			if strings.TrimSpace(lines[i]) == "" {
				flush()
				continue
			}
			if h, ok := heading(lines[i]); ok {
				flush()
				d.Headings = append(d.Headings, h)
			}
			if len(para) == 0 {
				paraStart = i + 1
			}
			para = append(para, lines[i])
			continue
		}
		flush()
		marker := m[1]
		b := Block{Lang: m[2], Line: i + 2}
		var body []string
		for i++; i < len(lines); i++ {
			if t := strings.TrimSpace(lines[i]); strings.HasPrefix(t, marker[:1]) && strings.Trim(t, marker[:1]) == "" && len(t) >= len(marker) {
				break
			}
			body = append(body, lines[i])
		}
		b.Text = strings.Join(body, "\n")
		d.Blocks = append(d.Blocks, b)
	}
	flush()
	return d
}

func heading(line string) (string, bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || !strings.HasPrefix(t, "#") {
		return "", false
	}
	level := len(t) - len(strings.TrimLeft(t, "#"))
	if level > 6 || (len(t) > level && t[level] != ' ') {
		return "", false
	}
	return strings.TrimSpace(strings.TrimRight(strings.TrimSpace(t[level:]), "#")), true
}

// spans finds the inline code spans of a paragraph: a run of n backticks up to the next
// run of exactly n.
func spans(para []string, start int) []Span {
	text := strings.Join(para, "\n")
	var out []Span
	for i := 0; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(text) && text[i+n] == '`' {
			n++
		}
		open := i
		i += n
		end := -1
		for j := i; j < len(text); {
			if text[j] != '`' {
				j++
				continue
			}
			k := 0
			for j+k < len(text) && text[j+k] == '`' {
				k++
			}
			if k == n {
				end = j
				break
			}
			j += k
		}
		if end < 0 {
			continue // a lone backtick run is literal text
		}
		body := strings.ReplaceAll(text[i:end], "\n", " ")
		if len(body) > 2 && body[0] == ' ' && body[len(body)-1] == ' ' {
			body = body[1 : len(body)-1]
		}
		out = append(out, Span{Line: start + strings.Count(text[:open], "\n"), Text: body})
		i = end + n
	}
	return out
}

var linkRE = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)

// links finds the targets of the paragraph's inline links, outside code spans.
func links(para []string, start int) []Link {
	var out []Link
	for n, line := range para {
		for _, m := range linkRE.FindAllStringSubmatchIndex(stripSpans(line), -1) {
			out = append(out, Link{Line: start + n, Target: line[m[2]:m[3]]})
		}
	}
	return out
}

// stripSpans blanks the code spans of one line, keeping its length.
func stripSpans(line string) string {
	b := []byte(line)
	in := false
	for i := range b {
		if b[i] == '`' {
			in = !in
			continue
		}
		if in {
			b[i] = ' '
		}
	}
	return string(b)
}

// Anchor is the fragment GitHub gives a heading: lower case, letters, digits, hyphens
// and underscores kept, spaces turned into hyphens, everything else dropped. (A second
// heading of the same text gets "-1" appended; Anchors does that.)
func Anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the fragments of a document's headings, as a set.
func (d Doc) Anchors() map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, h := range d.Headings {
		a := Anchor(h)
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
