package doccheck

import (
	"fmt"
	"regexp"
	"strings"
)

// Command is one simple command of a shell text, as a POSIX shell splits it.
type Command struct {
	Line int      // the line it starts on
	Env  []string // the NAME=value assignments before its words
	Args []string // its words, quotes removed; none for a line of bare assignments
	// Subst is the text inside each command substitution of its words, $(...) or
	// `...`: commands of their own, to check as well.
	Subst []string
	// Comment is the comment that ends its line, without the '#' (on the last command
	// of a line only). A comment on a line of its own is a Command without Args.
	Comment string

	end int // the line it ends on
}

// String is the command as a shell line (an approximation, for messages).
func (c Command) String() string {
	return strings.Join(append(append([]string(nil), c.Env...), c.Args...), " ")
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// Parse splits shell text into simple commands. It knows what the documentation uses:
// backslash line continuations, comments, single and double quotes, backslash escapes,
// $(...) and `...` substitutions, the operators && || | ; &, redirections (> >> < 2>&1
// &> and a file after them, which are dropped), and assignments before a command.
// firstLine is the line number of the text's first line. A here-document, a subshell or
// an unterminated quote is an error.
func Parse(text string, firstLine int) ([]Command, error) {
	p := &parser{src: text, line: firstLine}
	return p.parse()
}

type parser struct {
	src  string
	i    int
	line int

	cmds     []Command
	cur      Command
	words    []string
	word     strings.Builder
	inWord   bool
	redirect bool // the next word is a redirection's target: drop it
}

func (p *parser) parse() ([]Command, error) {
	p.cur.Line = p.line
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == '\\':
			if p.i+1 < len(p.src) && p.src[p.i+1] == '\n' {
				p.i += 2
				p.line++
				continue
			}
			if p.i+1 < len(p.src) {
				p.word.WriteByte(p.src[p.i+1])
				p.inWord = true
				p.i += 2
				continue
			}
			p.i++
		case c == '\n':
			p.endCommand()
			p.i++
			p.line++
			p.cur.Line = p.line
		case c == ' ' || c == '\t' || c == '\r':
			p.endWord()
			p.i++
		case c == '#' && !p.inWord:
			end := strings.IndexByte(p.src[p.i:], '\n')
			if end < 0 {
				end = len(p.src) - p.i
			}
			comment := strings.TrimSpace(p.src[p.i+1 : p.i+end])
			p.i += end
			p.endWord()
			if len(p.words) > 0 || len(p.cur.Env) > 0 || len(p.cur.Subst) > 0 {
				p.cur.Comment = comment
			} else if n := len(p.cmds); n > 0 && p.cmds[n-1].end == p.line && p.cmds[n-1].Comment == "" && len(p.cmds[n-1].Args) > 0 {
				p.cmds[n-1].Comment = comment
			} else {
				// A comment line of its own: kept as a command without words, so
				// that the checks can read it.
				p.cmds = append(p.cmds, Command{Line: p.line, Comment: comment, end: p.line})
			}
		case c == '\'':
			end := strings.IndexByte(p.src[p.i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated single quote", p.line)
			}
			s := p.src[p.i+1 : p.i+1+end]
			p.line += strings.Count(s, "\n")
			p.word.WriteString(s)
			p.inWord = true
			p.i += end + 2
		case c == '"':
			if err := p.doubleQuoted(); err != nil {
				return nil, err
			}
		case c == '$' && p.i+1 < len(p.src) && p.src[p.i+1] == '(':
			if err := p.substitution(); err != nil {
				return nil, err
			}
		case c == '`':
			if err := p.backquoted(); err != nil {
				return nil, err
			}
		case c == '&' && p.i+1 < len(p.src) && p.src[p.i+1] == '>':
			p.endWord()
			p.i += 2
			p.redirectTarget()
		case c == '&' || c == '|' || c == ';':
			p.endCommand()
			p.i++
			if p.i < len(p.src) && (p.src[p.i] == '&' || p.src[p.i] == '|') && p.src[p.i] == c {
				p.i++
			}
		case c == '>' || c == '<':
			if p.i+1 < len(p.src) && c == '<' && p.src[p.i+1] == '<' {
				return nil, fmt.Errorf("line %d: here-documents are not supported", p.line)
			}
			if p.inWord && strings.Trim(p.word.String(), "0123456789") == "" {
				p.word.Reset() // a file descriptor number: 2>
				p.inWord = false
			}
			p.endWord()
			p.i++
			if p.i < len(p.src) && p.src[p.i] == '>' {
				p.i++
			}
			p.redirectTarget()
		case c == '(' || c == ')' || c == '{' && !p.inWord && p.i+1 < len(p.src) && p.src[p.i+1] == ' ':
			return nil, fmt.Errorf("line %d: subshells and groups are not supported", p.line)
		default:
			p.word.WriteByte(c)
			p.inWord = true
			p.i++
		}
	}
	p.endCommand()
	return p.cmds, nil
}

// redirectTarget handles what follows a redirection operator: &N or &- (a descriptor),
// else the next word, a file, which is dropped.
func (p *parser) redirectTarget() {
	if p.i < len(p.src) && p.src[p.i] == '&' {
		p.i++
		for p.i < len(p.src) && (p.src[p.i] == '-' || ('0' <= p.src[p.i] && p.src[p.i] <= '9')) {
			p.i++
		}
		return
	}
	p.redirect = true
}

func (p *parser) doubleQuoted() error {
	start := p.line
	p.i++
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == '"':
			p.i++
			p.inWord = true
			return nil
		case c == '\\' && p.i+1 < len(p.src) && strings.IndexByte("\"\\$`\n", p.src[p.i+1]) >= 0:
			if p.src[p.i+1] == '\n' {
				p.line++
			} else {
				p.word.WriteByte(p.src[p.i+1])
			}
			p.i += 2
		case c == '$' && p.i+1 < len(p.src) && p.src[p.i+1] == '(':
			if err := p.substitution(); err != nil {
				return err
			}
		case c == '`':
			if err := p.backquoted(); err != nil {
				return err
			}
		default:
			if c == '\n' {
				p.line++
			}
			p.word.WriteByte(c)
			p.i++
		}
	}
	return fmt.Errorf("line %d: unterminated double quote", start)
}

// substitution reads $( ... ) at p.i: the text up to the matching parenthesis, quotes
// inside respected. The word keeps the substitution as written.
func (p *parser) substitution() error {
	depth := 0
	start := p.i
	for j := p.i + 1; j < len(p.src); j++ {
		switch p.src[j] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				inner := p.src[start+2 : j]
				p.cur.Subst = append(p.cur.Subst, inner)
				p.word.WriteString(p.src[start : j+1])
				p.inWord = true
				p.line += strings.Count(inner, "\n")
				p.i = j + 1
				return nil
			}
		case '\'':
			end := strings.IndexByte(p.src[j+1:], '\'')
			if end < 0 {
				return fmt.Errorf("line %d: unterminated single quote in $(...)", p.line)
			}
			j += end + 1
		case '"':
			for j++; j < len(p.src) && p.src[j] != '"'; j++ {
				if p.src[j] == '\\' {
					j++
				}
			}
		}
	}
	return fmt.Errorf("line %d: unterminated $(", p.line)
}

func (p *parser) backquoted() error {
	end := strings.IndexByte(p.src[p.i+1:], '`')
	if end < 0 {
		return fmt.Errorf("line %d: unterminated backquote", p.line)
	}
	inner := p.src[p.i+1 : p.i+1+end]
	p.cur.Subst = append(p.cur.Subst, inner)
	p.word.WriteString("`" + inner + "`")
	p.inWord = true
	p.line += strings.Count(inner, "\n")
	p.i += end + 2
	return nil
}

func (p *parser) endWord() {
	if !p.inWord {
		return
	}
	w := p.word.String()
	p.word.Reset()
	p.inWord = false
	if p.redirect {
		p.redirect = false
		return
	}
	if len(p.words) == 0 && assignment.MatchString(w) {
		p.cur.Env = append(p.cur.Env, w)
		return
	}
	p.words = append(p.words, w)
}

func (p *parser) endCommand() {
	p.endWord()
	p.redirect = false
	if len(p.words) > 0 || len(p.cur.Env) > 0 || len(p.cur.Subst) > 0 || p.cur.Comment != "" {
		p.cur.Args = p.words
		p.cur.end = p.line
		p.cmds = append(p.cmds, p.cur)
	}
	p.words = nil
	p.cur = Command{Line: p.line}
}
