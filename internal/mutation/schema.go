package mutation

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Mutant schemata: each target package is compiled once with every pending mutant behind
// a switch read at run time, so that each killer's test binary is built once a run and
// a mutant is only a run of prebuilt binaries, with MUTATION_SCHEMA_ACTIVE naming it.
//
// A site is the syntax one or more mutants change. Its schema evaluates what the code
// evaluates, in the same order, once: an operator becomes a call of a helper that
// takes the operands (generic over the operands' type for the ordered comparisons and
// the arithmetic), && and || take their right operand as a function literal (evaluated
// only when the operator evaluates it), and a removed statement becomes an if on the
// switch. A site falls back to an overlay build of its mutants (the code with the one
// mutant, as without schemata) when its schema could change what the unmutated code
// does or does not type-check: a constant expression (a call is not constant), a
// result whose type is not the one the expression had (a named boolean, an untyped
// operand that would take another type), a statement outside a statement list (a for
// loop's post statement), and any site the type checker refuses in the schema.
const (
	// SchemaActiveVar names the mutant a schemata test binary runs (its number; unset
	// or 0: none, the code as it is).
	SchemaActiveVar = "MUTATION_SCHEMA_ACTIVE"
	// SchemaReachVar, when set, is a file to which a schemata binary appends the number
	// of each mutant whose site it reaches, once: what a baseline records.
	SchemaReachVar = "MUTATION_SCHEMA_REACH"
	schemaPrefix   = "mutationSchema"
	schemaFileName = "zz_mutation_schema.go"
)

type siteKind int

const (
	siteBinary siteKind = iota // an operator of a binary expression
	siteCond                   // the condition of an if (remove-early-return)
	siteAssign                 // an assignment statement
	siteCall                   // a call statement
	siteBranch                 // break or continue
	siteIncDec                 // x++ or x--
	siteNeg                    // unary -
)

func kindOf(op Operator) siteKind {
	switch op {
	case RemoveEarlyReturn:
		return siteCond
	case RemoveAssignment:
		return siteAssign
	case RemoveCall:
		return siteCall
	case InvertLoopCtrl:
		return siteBranch
	case IncrementDecrement:
		return siteIncDec
	case InvertNegatives:
		return siteNeg
	}
	return siteBinary
}

// statement reports whether the site is a whole statement (its start is a statement's).
func (k siteKind) statement() bool {
	return k == siteAssign || k == siteCall || k == siteBranch || k == siteIncDec
}

type siteMutant struct {
	m  *Mutant
	id int
}

type site struct {
	kind       siteKind
	node       ast.Node
	start, end int // the span it replaces in the file
	muts       []siteMutant
	kids       []*site // the sites inside it, in order
	fallback   string  // why its mutants are built with an overlay ("": in the schema)
}

func (s *site) mutated(op Operator) string {
	for _, sm := range s.muts {
		if sm.m.Operator == op {
			return sm.m.Mutated
		}
	}
	return ""
}

func (s *site) id(op Operator) int {
	for _, sm := range s.muts {
		if sm.m.Operator == op {
			return sm.id
		}
	}
	return 0
}

// schemaFile is one file of a package with mutants: its sites and statement lists.
type schemaFile struct {
	path   string // absolute
	base   string
	src    []byte
	file   *ast.File
	sites  []*site // sorted by start, then the outer first
	roots  []*site
	lists  [][2]int // the spans of the statements of statement lists (probe places)
	inList map[ast.Node]bool
	muts   []siteMutant // every mutant of the file (sites and the rest)
}

// Schema is one package's schemata.
type Schema struct {
	// Files: the absolute path of each file with mutants (and of the helper file, new)
	// and its schema source.
	Files map[string][]byte
	// Fallback: a mutant not in the schema (built with an overlay when it runs) and why.
	Fallback map[string]string
	// Always: fallback mutants with no reach probe (at package level): every run of a
	// binary that imports the package counts as reaching them.
	Always map[string]bool
	// Sites counts the sites in the schema.
	Sites int
}

// Schema writes the schemata of the package's mutants ms, each numbered by ids (its
// value of SchemaActiveVar). maxID is the largest number of the run (the helpers size
// their reach table by it).
func (p *Package) Schema(ms []*Mutant, ids map[string]int, maxID int) (*Schema, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := &Schema{Files: map[string][]byte{}, Fallback: map[string]string{}, Always: map[string]bool{}}
	byBase := map[string]*schemaFile{}
	var files []*schemaFile
	for _, m := range ms {
		base := filepath.Base(filepath.FromSlash(m.File))
		f := byBase[base]
		if f == nil {
			path := filepath.Join(p.Dir, base)
			if p.parsed[path] == nil {
				return nil, fmt.Errorf("mutation: schema: %s is not a file of %s", m.File, p.ImportPath)
			}
			f = &schemaFile{path: path, base: base, src: p.src[path], file: p.parsed[path]}
			byBase[base] = f
			files = append(files, f)
		}
		id, ok := ids[m.ID]
		if !ok || m.node == nil {
			return nil, fmt.Errorf("mutation: schema: mutant %s has no number or no syntax", m.ID)
		}
		f.muts = append(f.muts, siteMutant{m, id})
	}
	for _, f := range files {
		p.sites(f)
	}
	helperPath := filepath.Join(p.Dir, schemaFileName)
	if _, ok := p.src[helperPath]; ok {
		return nil, fmt.Errorf("mutation: schema: %s exists", helperPath)
	}
	helper := schemaHelpers(files[0].file.Name.Name, maxID)
	for round := 0; ; round++ {
		srcs := map[string][]byte{}
		for _, f := range files {
			srcs[f.path] = p.render(f)
		}
		bad, err := p.checkSchema(files, srcs, helperPath, helper)
		if err != nil {
			return nil, err
		}
		if len(bad) == 0 {
			for path, src := range srcs {
				out.Files[path] = src
			}
			break
		}
		if round == 50 {
			return nil, fmt.Errorf("mutation: schema of %s: still refused after %d rounds", p.ImportPath, round)
		}
	}
	out.Files[helperPath] = helper
	for _, f := range files {
		for _, s := range f.sites {
			if s.fallback != "" {
				for _, sm := range s.muts {
					out.Fallback[sm.m.ID] = s.fallback
					if f.listOf(sm.m) < 0 {
						out.Always[sm.m.ID] = true
					}
				}
			} else {
				out.Sites++
			}
		}
	}
	return out, nil
}

// sites builds the file's sites from its mutants and marks those whose schema could
// not keep the code's meaning.
func (p *Package) sites(f *schemaFile) {
	off := func(pos token.Pos) int { return p.fset.Position(pos).Offset }
	type key struct {
		n ast.Node
		k siteKind
	}
	byKey := map[key]*site{}
	for _, sm := range f.muts {
		k := key{sm.m.node, kindOf(sm.m.Operator)}
		s := byKey[k]
		if s == nil {
			s = &site{kind: k.k, node: k.n, start: off(k.n.Pos()), end: off(k.n.End())}
			if k.k == siteCond {
				cond := k.n.(*ast.IfStmt).Cond
				s.start, s.end = off(cond.Pos()), off(cond.End())
			}
			byKey[k] = s
			f.sites = append(f.sites, s)
		}
		s.muts = append(s.muts, sm)
	}
	slices.SortFunc(f.sites, func(a, b *site) int {
		if a.start != b.start {
			return a.start - b.start
		}
		if a.end != b.end {
			return b.end - a.end
		}
		return rank(a) - rank(b)
	})
	var stack []*site
	for _, s := range f.sites {
		for len(stack) > 0 && stack[len(stack)-1].end <= s.start {
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			f.roots = append(f.roots, s)
		} else {
			top := stack[len(stack)-1]
			top.kids = append(top.kids, s)
		}
		stack = append(stack, s)
	}
	// The statements of statement lists: where a statement may become an if, and where
	// a fallback mutant's reach probe goes.
	f.inList = map[ast.Node]bool{}
	ast.Inspect(f.file, func(n ast.Node) bool {
		var list []ast.Stmt
		switch x := n.(type) {
		case *ast.BlockStmt:
			list = x.List
		case *ast.CaseClause:
			list = x.Body
		case *ast.CommClause:
			list = x.Body
		case *ast.LabeledStmt:
			if f.inList[x] {
				f.inList[x.Stmt] = true
			}
		}
		for _, s := range list {
			switch s.(type) {
			case *ast.CaseClause, *ast.CommClause:
				continue // a switch's or select's body lists clauses, not statements
			}
			f.inList[s] = true
			f.lists = append(f.lists, [2]int{off(s.Pos()), off(s.End())})
		}
		return true
	})
	for _, s := range f.sites {
		s.fallback = p.unsupported(f, s)
	}
}

func rank(s *site) int {
	if s.kind == siteCond {
		return 0 // the condition's site holds the binary expression that is all of it
	}
	return 1
}

// unsupported says why a site's schema could change the unmutated code's meaning or
// could not be written ("" when it can).
func (p *Package) unsupported(f *schemaFile, s *site) string {
	boolean := func(x ast.Expr) bool {
		tv, ok := p.info.Types[x]
		if !ok || tv.Type == nil {
			return false
		}
		return types.Identical(tv.Type, types.Typ[types.Bool]) || types.Identical(tv.Type, types.Typ[types.UntypedBool])
	}
	switch x := s.node.(type) {
	case *ast.BinaryExpr:
		tv := p.info.Types[x]
		switch x.Op {
		case token.LAND, token.LOR, token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ:
			if tv.Value != nil {
				return "constant expression"
			}
			if !boolean(x) {
				return "its value is not a plain bool"
			}
		default:
			return arithmeticRefused(tv)
		}
	case *ast.UnaryExpr:
		return arithmeticRefused(p.info.Types[x])
	case *ast.IfStmt:
		if !boolean(x.Cond) {
			return "its condition is not a plain bool"
		}
	case *ast.AssignStmt, *ast.ExprStmt, *ast.BranchStmt:
		if !f.inList[s.node] {
			return "a statement outside a statement list"
		}
	}
	return ""
}

// arithmeticRefused says why an arithmetic expression of type and value tv cannot be a
// helper's call: untyped, or a constant that is not an integer. A constant integer
// expression computed at run time in its type gives the constant (each operand and the
// result are representable in it, or the original would not compile, and integer
// division truncates alike); a float constant is exact, its run-time value rounded at
// each step. A constant where the language wants one (a const declaration, an array's
// length) is refused by the type checker, and falls back.
func arithmeticRefused(tv types.TypeAndValue) string {
	if tv.Type == nil || !isTyped(tv.Type) {
		return "untyped value"
	}
	if tv.Value != nil {
		if b, ok := tv.Type.Underlying().(*types.Basic); !ok || b.Info()&types.IsInteger == 0 {
			return "constant expression not an integer"
		}
	}
	return ""
}

func isTyped(t types.Type) bool {
	b, ok := t.(*types.Basic)
	return !ok || b.Info()&types.IsUntyped == 0
}

// listOf is the index in f.lists of the innermost listed statement that holds the
// mutant, -1 when none does (package level).
func (f *schemaFile) listOf(m *Mutant) int {
	best := -1
	for i, l := range f.lists {
		if l[0] <= m.Start && m.End <= l[1] && (best < 0 || l[1]-l[0] <= f.lists[best][1]-f.lists[best][0]) {
			best = i
		}
	}
	return best
}

// renderer writes one file's schema.
type renderer struct {
	fset   *token.FileSet
	src    []byte
	probes map[int][]int // offset -> the numbers whose reach probe goes before it
	quiet  map[int]int   // offsets whose probes a statement site wrote before itself
}

func (p *Package) render(f *schemaFile) []byte {
	r := &renderer{fset: p.fset, src: f.src, probes: map[int][]int{}, quiet: map[int]int{}}
	for _, s := range f.sites {
		if s.fallback == "" {
			continue
		}
		for _, sm := range s.muts {
			if i := f.listOf(sm.m); i >= 0 {
				r.probes[f.lists[i][0]] = append(r.probes[f.lists[i][0]], sm.id)
			}
		}
	}
	return []byte(r.span(0, len(f.src), f.roots))
}

// text is the source from a to b with the probes of the offsets in [a, b).
func (r *renderer) text(a, b int) string {
	var out strings.Builder
	pos := a
	var offs []int
	for o := range r.probes {
		if o >= a && o < b && r.quiet[o] == 0 {
			offs = append(offs, o)
		}
	}
	slices.Sort(offs)
	for _, o := range offs {
		out.Write(r.src[pos:o])
		out.WriteString(r.probeText(o))
		pos = o
	}
	out.Write(r.src[pos:b])
	return out.String()
}

func (r *renderer) probeText(o int) string {
	var out strings.Builder
	for _, id := range r.probes[o] {
		fmt.Fprintf(&out, "%sReach(%d); ", schemaPrefix, id)
	}
	return out.String()
}

// span is the source from a to b with the sites kids (those inside it) written.
func (r *renderer) span(from, to int, kids []*site) string {
	var out strings.Builder
	pos := from
	for _, k := range kids {
		if k.start < from || k.end > to {
			continue
		}
		out.WriteString(r.text(pos, k.start))
		out.WriteString(r.site(k))
		pos = k.end
	}
	out.WriteString(r.text(pos, to))
	return out.String()
}

func (r *renderer) site(s *site) string {
	if s.fallback != "" {
		return r.span(s.start, s.end, s.kids)
	}
	var pre string
	if s.kind.statement() {
		pre = r.probeText(s.start)
		r.quiet[s.start]++
		defer func() { r.quiet[s.start]-- }()
	}
	return pre + r.schema(s)
}

func (r *renderer) schema(s *site) string {
	between := func(a, b int) string { return string(r.src[a:b]) }
	switch x := s.node.(type) {
	case *ast.BinaryExpr:
		xs, ys := r.spanOf(x.X, s), r.spanOf(x.Y, s)
		op := between(r.end(x.X), r.start(x.Y))
		switch x.Op {
		case token.LAND:
			return fmt.Sprintf("%sAnd(%d, %s, func() bool { return %s })", schemaPrefix, s.id(InvertLogical), xs, ys)
		case token.LOR:
			return fmt.Sprintf("%sOr(%d, %s, func() bool { return %s })", schemaPrefix, s.id(InvertLogical), xs, ys)
		case token.EQL, token.NEQ:
			return fmt.Sprintf("%sNot(%d, %s%s%s)", schemaPrefix, s.id(ConditionalsNegation), xs, op, ys)
		case token.LSS, token.LEQ, token.GTR, token.GEQ:
			return fmt.Sprintf("%s%s(%s, %s, %d, %d)", schemaPrefix, opName[x.Op], xs, ys, s.id(ConditionalsBoundary), s.id(ConditionalsNegation))
		default:
			return fmt.Sprintf("%s%s(%s, %s, %d)", schemaPrefix, opName[x.Op], xs, ys, s.id(ArithmeticBase))
		}
	case *ast.IfStmt:
		return fmt.Sprintf("!%sHit(%d) && (%s)", schemaPrefix, s.id(RemoveEarlyReturn), r.span(s.start, s.end, s.kids))
	case *ast.AssignStmt:
		// The mutant's own text when it runs (the sites inside it then all run as
		// they are), the code with its sites otherwise.
		return fmt.Sprintf("if %sHit(%d) { %s } else { %s }", schemaPrefix, s.id(RemoveAssignment), s.mutated(RemoveAssignment), r.span(s.start, s.end, s.kids))
	case *ast.ExprStmt:
		return fmt.Sprintf("if !%sHit(%d) { %s }", schemaPrefix, s.id(RemoveCall), r.span(s.start, s.end, s.kids))
	case *ast.BranchStmt:
		return fmt.Sprintf("if %sHit(%d) { %s } else { %s }", schemaPrefix, s.id(InvertLoopCtrl), loopctrl[x.Tok], x.Tok)
	case *ast.IncDecStmt:
		name := "Inc"
		if x.Tok == token.DEC {
			name = "Dec"
		}
		return fmt.Sprintf("%s%s(%d, &(%s))", schemaPrefix, name, s.id(IncrementDecrement), r.spanOf(x.X, s))
	case *ast.UnaryExpr:
		return fmt.Sprintf("%sNeg(%d, %s)", schemaPrefix, s.id(InvertNegatives), r.spanOf(x.X, s))
	}
	panic(fmt.Sprintf("mutation: schema: no template for %T", s.node))
}

var opName = map[token.Token]string{
	token.LSS: "Lss", token.LEQ: "Leq", token.GTR: "Gtr", token.GEQ: "Geq",
	token.ADD: "Add", token.SUB: "Sub", token.MUL: "Mul", token.QUO: "Quo", token.REM: "Rem",
}

func (r *renderer) start(n ast.Node) int { return r.fset.Position(n.Pos()).Offset }
func (r *renderer) end(n ast.Node) int   { return r.fset.Position(n.End()).Offset }

func (r *renderer) spanOf(n ast.Node, s *site) string {
	return r.span(r.start(n), r.end(n), s.kids)
}

// checkSchema type-checks the package with the schema sources and the helper file, and
// marks fallback the sites the checker refuses (or whose helper's type is not the
// expression's). It returns the sites marked this round.
func (p *Package) checkSchema(files []*schemaFile, srcs map[string][]byte, helperPath string, helper []byte) ([]*site, error) {
	bySchemaFile := map[string]*schemaFile{}
	var parsed []*ast.File
	astOf := map[*schemaFile]*ast.File{}
	for _, path := range p.Files {
		src, ok := srcs[path]
		if !ok {
			parsed = append(parsed, p.parsed[path])
			continue
		}
		af, err := parser.ParseFile(p.fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("mutation: the schema of %s does not parse: %w", path, err)
		}
		parsed = append(parsed, af)
		for _, f := range files {
			if f.path == path {
				bySchemaFile[path] = f
				astOf[f] = af
			}
		}
	}
	hf, err := parser.ParseFile(p.fset, helperPath, helper, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("mutation: the schema helpers do not parse: %w", err)
	}
	parsed = append(parsed, hf)
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	var errs []types.Error
	conf := types.Config{Importer: p.imp, Error: func(err error) {
		if te, ok := err.(types.Error); ok { //nolint:errorlint // the checker's own type
			errs = append(errs, te)
		}
	}}
	_, _ = conf.Check(p.ImportPath, p.fset, parsed, info)

	byID := map[int]*site{}
	for _, f := range files {
		for _, s := range f.sites {
			for _, sm := range s.muts {
				byID[sm.id] = s
			}
		}
	}
	var bad []*site
	mark := func(s *site, why string) {
		if s.fallback == "" {
			s.fallback = "refused in the schema: " + why
			bad = append(bad, s)
		}
	}
	for _, te := range errs {
		pos := p.fset.Position(te.Pos)
		f := bySchemaFile[pos.Filename]
		if f == nil {
			if pos.Filename == helperPath {
				return nil, fmt.Errorf("mutation: the schema helpers of %s do not type-check: %s", p.ImportPath, te.Msg)
			}
			return nil, fmt.Errorf("mutation: the schema of %s: %s (in a file without mutants)", p.ImportPath, te.Error())
		}
		af := astOf[f]
		if s := innermostMarker(af, te.Pos, byID); s != nil {
			mark(s, te.Msg)
			continue
		}
		// Not inside a site's schema (a missing return after a break made continue, at
		// the function's end): the break and continue sites of its function, else all.
		in := sitesIn(af, te.Pos, byID)
		var branches []*site
		for _, s := range in {
			if s.kind == siteBranch && s.fallback == "" {
				branches = append(branches, s)
			}
		}
		if len(branches) > 0 {
			in = branches
		}
		if len(in) == 0 {
			in = append(in, f.sites...)
		}
		for _, s := range in {
			mark(s, te.Msg)
		}
		if len(bad) == 0 {
			return nil, fmt.Errorf("mutation: the schema of %s: %s", p.ImportPath, te.Error())
		}
	}
	if len(errs) > 0 {
		return bad, nil
	}
	// The helper's type must be the expression's (an untyped operand takes the other's
	// type in both, but a value the context typed otherwise would not).
	for _, af := range astOf {
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			_, ids := helperCall(call)
			if len(ids) == 0 {
				return true
			}
			s := byID[ids[0]]
			if s == nil || s.fallback != "" || (s.kind != siteBinary || isComparison(s.node)) && s.kind != siteNeg {
				return true
			}
			want, got := p.info.Types[s.node.(ast.Expr)].Type, info.Types[call].Type
			if want == nil || got == nil || !types.Identical(want, got) {
				mark(s, fmt.Sprintf("the schema's type %v is not the expression's %v", got, want))
			}
			return true
		})
	}
	return bad, nil
}

func isComparison(n ast.Node) bool {
	x, ok := n.(*ast.BinaryExpr)
	if !ok {
		return false
	}
	switch x.Op {
	case token.LAND, token.LOR, token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ:
		return true
	}
	return false
}

// helperCall returns the name of a schema helper called, and the mutant numbers among
// its arguments (not 0).
func helperCall(call *ast.CallExpr) (string, []int) {
	fn, ok := call.Fun.(*ast.Ident)
	if !ok || !strings.HasPrefix(fn.Name, schemaPrefix) {
		return "", nil
	}
	name := strings.TrimPrefix(fn.Name, schemaPrefix)
	var at []int
	switch name {
	case "Lss", "Leq", "Gtr", "Geq":
		at = []int{2, 3}
	case "Add", "Sub", "Mul", "Quo", "Rem":
		at = []int{2}
	default:
		at = []int{0}
	}
	var ids []int
	for _, i := range at {
		if i >= len(call.Args) {
			continue
		}
		if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.INT {
			if n, err := strconv.Atoi(lit.Value); err == nil && n > 0 {
				ids = append(ids, n)
			}
		}
	}
	return fn.Name, ids
}

// marker is the syntax of a site's schema in the schema file: a helper call, an if on
// the switch, or the condition of remove-early-return.
func markerIDs(n ast.Node) []int {
	switch x := n.(type) {
	case *ast.CallExpr:
		_, ids := helperCall(x)
		return ids
	case *ast.IfStmt:
		return markerIDs(unNot(x.Cond))
	case *ast.BinaryExpr:
		if x.Op == token.LAND {
			if u, ok := x.X.(*ast.UnaryExpr); ok && u.Op == token.NOT {
				if call, ok := u.X.(*ast.CallExpr); ok {
					if name, ids := helperCall(call); name == schemaPrefix+"Hit" {
						return ids
					}
				}
			}
		}
	}
	return nil
}

func unNot(x ast.Expr) ast.Expr {
	if u, ok := x.(*ast.UnaryExpr); ok && u.Op == token.NOT {
		return u.X
	}
	return x
}

// innermostMarker is the site whose schema syntax is the innermost to hold pos.
func innermostMarker(af *ast.File, pos token.Pos, byID map[int]*site) *site {
	var best *site
	ast.Inspect(af, func(n ast.Node) bool {
		if n == nil || pos < n.Pos() || pos >= n.End() {
			return false
		}
		for _, id := range markerIDs(n) {
			if s := byID[id]; s != nil && s.fallback == "" {
				best = s
				break
			}
		}
		return true
	})
	return best
}

// sitesIn lists the sites whose schema is in the top-level declaration that holds pos.
func sitesIn(af *ast.File, pos token.Pos, byID map[int]*site) []*site {
	var out []*site
	for _, d := range af.Decls {
		if pos < d.Pos() || pos > d.End() {
			continue
		}
		ast.Inspect(d, func(n ast.Node) bool {
			for _, id := range markerIDs(n) {
				if s := byID[id]; s != nil && s.fallback == "" && !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
			return true
		})
	}
	return out
}

// schemaImports are the packages the helper file imports (LoadPackages lists their
// export data for the type checker).
var schemaImports = []string{"cmp", "os", "strconv", "sync/atomic"}

// schemaHelpers is the helper file of a package's schemata.
func schemaHelpers(pkg string, maxID int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `// Code generated by internal/mutation (mutant schemata); DO NOT EDIT.

package %s

import (
	"cmp"
	"os"
	"strconv"
	"sync/atomic"
)

// The mutant this process runs (%s; 0: none) and the file where it records the
// mutants whose sites it reaches (%s).
var P_Active, P_ReachFile = P_Init()

var P_Seen = make([]atomic.Bool, %d)

func P_Init() (int, *os.File) {
	n, _ := strconv.Atoi(os.Getenv(%q))
	var f *os.File
	if path := os.Getenv(%q); path != "" {
		f, _ = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	}
	return n, f
}

// P_Hit records that the site of mutant id was reached and reports whether it is the
// one this process runs.
func P_Hit(id int) bool {
	if P_ReachFile != nil && id > 0 && id < len(P_Seen) && !P_Seen[id].Swap(true) {
		_, _ = P_ReachFile.WriteString(strconv.Itoa(id) + "\n")
	}
	return id != 0 && id == P_Active
}

// P_Reach is the probe of a mutant built without the schema: its statement was reached.
func P_Reach(id int) { P_Hit(id) }

type P_Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64 | ~complex64 | ~complex128
}

type P_Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
}

func P_Not(id int, v bool) bool {
	if P_Hit(id) {
		return !v
	}
	return v
}

func P_And(id int, x bool, y func() bool) bool {
	if P_Hit(id) {
		return x || y()
	}
	return x && y()
}

func P_Or(id int, x bool, y func() bool) bool {
	if P_Hit(id) {
		return x && y()
	}
	return x || y()
}

// The ordered comparisons: b is the boundary mutant, n the negation.
func P_Lss[T cmp.Ordered](x, y T, b, n int) bool {
	hb, hn := P_Hit(b), P_Hit(n)
	switch {
	case hb:
		return x <= y
	case hn:
		return x >= y
	}
	return x < y
}

func P_Leq[T cmp.Ordered](x, y T, b, n int) bool {
	hb, hn := P_Hit(b), P_Hit(n)
	switch {
	case hb:
		return x < y
	case hn:
		return x > y
	}
	return x <= y
}

func P_Gtr[T cmp.Ordered](x, y T, b, n int) bool {
	hb, hn := P_Hit(b), P_Hit(n)
	switch {
	case hb:
		return x >= y
	case hn:
		return x <= y
	}
	return x > y
}

func P_Geq[T cmp.Ordered](x, y T, b, n int) bool {
	hb, hn := P_Hit(b), P_Hit(n)
	switch {
	case hb:
		return x > y
	case hn:
		return x < y
	}
	return x >= y
}

func P_Add[T P_Number](x, y T, id int) T {
	if P_Hit(id) {
		return x - y
	}
	return x + y
}

func P_Sub[T P_Number](x, y T, id int) T {
	if P_Hit(id) {
		return x + y
	}
	return x - y
}

func P_Mul[T P_Number](x, y T, id int) T {
	if P_Hit(id) {
		return x / y
	}
	return x * y
}

func P_Quo[T P_Number](x, y T, id int) T {
	if P_Hit(id) {
		return x * y
	}
	return x / y
}

func P_Rem[T P_Integer](x, y T, id int) T {
	if P_Hit(id) {
		return x * y
	}
	return x %% y
}

func P_Neg[T P_Number](id int, x T) T {
	if P_Hit(id) {
		return x
	}
	return -x
}

func P_Inc[T P_Number](id int, p *T) {
	if P_Hit(id) {
		*p--
		return
	}
	*p++
}

func P_Dec[T P_Number](id int, p *T) {
	if P_Hit(id) {
		*p++
		return
	}
	*p--
}
`, pkg, SchemaActiveVar, SchemaReachVar, maxID+1, SchemaActiveVar, SchemaReachVar)
	return bytes.ReplaceAll(b.Bytes(), []byte("P_"), []byte(schemaPrefix))
}
