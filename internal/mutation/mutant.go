package mutation

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strings"
)

// Operator names a kind of mutation. The set is gremlins' (v0.6.0) default and optional
// token operators, less the bitwise ones, plus three that remove a statement.
type Operator string

// The operators.
const (
	// ConditionalsBoundary: < and <=, > and >= swapped.
	ConditionalsBoundary Operator = "conditionals-boundary"
	// ConditionalsNegation: == and !=, < and >=, > and <= swapped.
	ConditionalsNegation Operator = "conditionals-negation"
	// ArithmeticBase: + and -, * and / swapped, % made * (numeric operands only).
	ArithmeticBase Operator = "arithmetic-base"
	// IncrementDecrement: ++ and -- swapped.
	IncrementDecrement Operator = "increment-decrement"
	// InvertNegatives: unary - removed.
	InvertNegatives Operator = "invert-negatives"
	// InvertLogical: && and || swapped.
	InvertLogical Operator = "invert-logical"
	// InvertLoopCtrl: break and continue swapped, in a loop (not a switch or select).
	InvertLoopCtrl Operator = "invert-loopctrl"
	// RemoveEarlyReturn: the condition of an if without else whose body ends in a return
	// made false, as false && (cond) (a dropped error check or guard).
	RemoveEarlyReturn Operator = "remove-early-return"
	// RemoveAssignment: x = e, x op= e made _ = e (the right side still evaluated).
	RemoveAssignment Operator = "remove-assignment"
	// RemoveCall: a call statement removed (not sync's Lock, Unlock, Add, Done, Wait, nor
	// panic: their removal hangs or does not compile, and tells nothing of the tests).
	RemoveCall Operator = "remove-call"
)

// Operators is every operator, in the order mutants are listed.
var Operators = []Operator{
	ConditionalsBoundary, ConditionalsNegation, ArithmeticBase, IncrementDecrement,
	InvertNegatives, InvertLogical, InvertLoopCtrl, RemoveEarlyReturn, RemoveAssignment, RemoveCall,
}

// ParseOperators reads a comma-separated list of operator names; "all" or "" is every one.
func ParseOperators(s string) ([]Operator, error) {
	if s == "" || s == "all" {
		return Operators, nil
	}
	var ops []Operator
	for f := range strings.SplitSeq(s, ",") {
		op := Operator(strings.TrimSpace(f))
		if !slices.Contains(Operators, op) {
			return nil, fmt.Errorf("mutation: unknown operator %q (known: %v)", op, Operators)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// Mutant is one change to one file: the bytes [Start, End) of the file replaced by
// Replacement.
type Mutant struct {
	// ID is stable for the same file content and the same change (see mutantID).
	ID       string   `json:"id"`
	File     string   `json:"file"` // slash path from the module's root
	FileHash string   `json:"file_hash"`
	Line     int      `json:"line"`
	Col      int      `json:"col"`
	Operator Operator `json:"operator"`
	Original string   `json:"original"` // the replaced text
	Mutated  string   `json:"mutated"`  // what replaces it
	// Func is the enclosing function ("" at package level).
	Func  string `json:"func,omitempty"`
	Start int    `json:"start"`
	End   int    `json:"end"`
	// SkipReason is set when the mutant is listed but not run (logging only).
	SkipReason string `json:"skip_reason,omitempty"`
	// node is the syntax the mutant changes (the if statement of remove-early-return),
	// in the parse Enumerate was given: what the schemata are written from. Nil for a
	// mutant read from a report.
	node ast.Node
}

// Apply returns src with the mutation applied.
func (m *Mutant) Apply(src []byte) []byte {
	out := make([]byte, 0, len(src)+len(m.Mutated))
	out = append(out, src[:m.Start]...)
	out = append(out, m.Mutated...)
	return append(out, src[m.End:]...)
}

// fileHash is the hex SHA-256 of a file's content (its first 16 digits).
func fileHash(src []byte) string {
	sum := sha256.Sum256(src)
	return hex.EncodeToString(sum[:8])
}

func mutantID(m *Mutant) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%d\x00%s\x00%s", m.File, m.FileHash, m.Start, m.End, m.Operator, m.Mutated))
	return hex.EncodeToString(sum[:6])
}

// enumerator walks one file and collects its mutants.
type enumerator struct {
	fset    *token.FileSet
	file    *ast.File
	src     []byte
	rel     string
	hash    string
	info    *types.Info // nil: no type information (every + is mutated)
	ops     map[Operator]bool
	out     []Mutant
	fn      string
	node    ast.Node   // the node being visited
	loopish []ast.Node // the enclosing for, range, switch, type switch and select statements
	logOnly []ast.Node // enclosing statements that only log
}

// Enumerate lists the mutants of one parsed file whose source is src, with ops enabled.
// info may be nil. rel is the file's slash path from the module root.
func Enumerate(fset *token.FileSet, file *ast.File, src []byte, rel string, info *types.Info, ops []Operator) []Mutant {
	e := &enumerator{fset: fset, file: file, src: src, rel: rel, hash: fileHash(src), info: info, ops: map[Operator]bool{}}
	for _, op := range ops {
		e.ops[op] = true
	}
	for _, d := range file.Decls {
		e.fn = ""
		if fd, ok := d.(*ast.FuncDecl); ok {
			e.fn = fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				e.fn = recvName(fd.Recv.List[0].Type) + "." + e.fn
			}
		}
		e.walk(d)
	}
	return e.out
}

func recvName(x ast.Expr) string {
	switch t := x.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// walk visits n and its children, keeping the stacks of enclosing loops and log-only
// statements.
func (e *enumerator) walk(n ast.Node) {
	ast.Inspect(n, func(c ast.Node) bool {
		if c == nil {
			return true
		}
		savedLoops, savedLog := e.loopish, len(e.logOnly)
		scoped := false
		switch c.(type) {
		case *ast.ForStmt, *ast.RangeStmt, *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
			e.loopish = append(slices.Clip(e.loopish), c)
			scoped = true
		case *ast.FuncLit:
			// break and continue do not cross a function literal.
			e.loopish = nil
			scoped = true
		}
		if s, ok := c.(ast.Stmt); ok && logOnly(s) {
			e.logOnly = append(e.logOnly, c)
			scoped = true
		}
		e.visit(c)
		if !scoped {
			return true
		}
		e.children(c)
		e.loopish, e.logOnly = savedLoops, e.logOnly[:savedLog]
		return false
	})
}

// children walks n's children (not n itself).
func (e *enumerator) children(n ast.Node) {
	first := true
	ast.Inspect(n, func(c ast.Node) bool {
		if first {
			first = false
			return true
		}
		if c != nil {
			e.walk(c)
		}
		return false
	})
}

var (
	boundary = map[token.Token]token.Token{token.LSS: token.LEQ, token.LEQ: token.LSS, token.GTR: token.GEQ, token.GEQ: token.GTR}
	negation = map[token.Token]token.Token{
		token.EQL: token.NEQ, token.NEQ: token.EQL, token.LSS: token.GEQ, token.GEQ: token.LSS, token.GTR: token.LEQ, token.LEQ: token.GTR,
	}
	arithmetic = map[token.Token]token.Token{token.ADD: token.SUB, token.SUB: token.ADD, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL}
	logical    = map[token.Token]token.Token{token.LAND: token.LOR, token.LOR: token.LAND}
	incdec     = map[token.Token]token.Token{token.INC: token.DEC, token.DEC: token.INC}
	loopctrl   = map[token.Token]token.Token{token.BREAK: token.CONTINUE, token.CONTINUE: token.BREAK}
	// Calls whose removal hangs (sync) or does not compile (panic): not mutated.
	keepCalls = map[string]bool{"Lock": true, "Unlock": true, "RLock": true, "RUnlock": true, "Add": true, "Done": true, "Wait": true, "panic": true}
)

func (e *enumerator) visit(n ast.Node) {
	e.node = n
	switch x := n.(type) {
	case *ast.BinaryExpr:
		if to, ok := boundary[x.Op]; ok && e.ordered(x) {
			e.token(x.OpPos, x.Op, to, ConditionalsBoundary)
		}
		if to, ok := negation[x.Op]; ok && (x.Op == token.EQL || x.Op == token.NEQ || e.ordered(x)) {
			e.token(x.OpPos, x.Op, to, ConditionalsNegation)
		}
		if to, ok := arithmetic[x.Op]; ok && e.numeric(x) {
			e.token(x.OpPos, x.Op, to, ArithmeticBase)
		}
		if to, ok := logical[x.Op]; ok {
			e.token(x.OpPos, x.Op, to, InvertLogical)
		}
	case *ast.IncDecStmt:
		e.token(x.TokPos, x.Tok, incdec[x.Tok], IncrementDecrement)
	case *ast.UnaryExpr:
		if x.Op == token.SUB {
			e.add(InvertNegatives, x.OpPos, x.OpPos+1, "")
		}
	case *ast.BranchStmt:
		if to, ok := loopctrl[x.Tok]; ok && x.Label == nil && len(e.loopish) > 0 {
			switch e.loopish[len(e.loopish)-1].(type) {
			case *ast.ForStmt, *ast.RangeStmt:
				e.token(x.TokPos, x.Tok, to, InvertLoopCtrl)
			}
		}
	case *ast.IfStmt:
		if x.Else == nil && len(x.Body.List) > 0 {
			if _, ok := x.Body.List[len(x.Body.List)-1].(*ast.ReturnStmt); ok {
				// false && (cond): the condition's variables stay used, so it compiles.
				cond := string(e.src[e.off(x.Cond.Pos()):e.off(x.Cond.End())])
				e.add(RemoveEarlyReturn, x.Cond.Pos(), x.Cond.End(), "false && ("+cond+")")
			}
		}
	case *ast.AssignStmt:
		if x.Tok == token.DEFINE || allBlank(x.Lhs) {
			return
		}
		blanks := strings.TrimSuffix(strings.Repeat("_, ", len(x.Lhs)), ", ")
		if x.Tok != token.ASSIGN { // op-assign: x += e
			blanks = "_"
		}
		rhs := string(e.src[e.off(x.Rhs[0].Pos()):e.off(x.Rhs[len(x.Rhs)-1].End())])
		if len(x.Lhs) == len(x.Rhs) && slices.ContainsFunc(x.Rhs, e.isNil) {
			// _ = nil does not compile: the nil values are dropped with their targets
			// (x, y = nil, f() made _ = f(); x = nil made _ = 0).
			var kept []string
			for _, r := range x.Rhs {
				if !e.isNil(r) {
					kept = append(kept, string(e.src[e.off(r.Pos()):e.off(r.End())]))
				}
			}
			blanks, rhs = strings.TrimSuffix(strings.Repeat("_, ", len(kept)), ", "), strings.Join(kept, ", ")
			if len(kept) == 0 {
				blanks, rhs = "_", "0"
			}
		}
		e.add(RemoveAssignment, x.Pos(), x.End(), blanks+" = "+rhs)
	case *ast.ExprStmt:
		call, ok := x.X.(*ast.CallExpr)
		if !ok || keepCalls[lastName(call.Fun)] {
			return
		}
		e.add(RemoveCall, x.Pos(), x.End(), "_ = 0")
	}
}

// isNil reports whether x is the untyped nil.
func (e *enumerator) isNil(x ast.Expr) bool {
	if e.info != nil {
		if tv, ok := e.info.Types[x]; ok {
			return tv.IsNil()
		}
	}
	id, ok := x.(*ast.Ident)
	return ok && id.Name == "nil"
}

func allBlank(xs []ast.Expr) bool {
	for _, x := range xs {
		if id, ok := x.(*ast.Ident); !ok || id.Name != "_" {
			return false
		}
	}
	return true
}

// lastName is the last name of a callee or receiver expression: f for f, m for x.m and
// x.m[T]; "" for anything else.
func lastName(f ast.Expr) string {
	switch x := f.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.IndexExpr:
		return lastName(x.X)
	}
	return ""
}

// ordered reports whether the comparison's operands may be ordered (numbers or strings):
// without type information, always.
func (e *enumerator) ordered(x *ast.BinaryExpr) bool {
	return e.basic(x.X, types.IsOrdered)
}

// numeric reports whether an arithmetic expression is on numbers (a + on strings is
// concatenation, which - does not compile to).
func (e *enumerator) numeric(x *ast.BinaryExpr) bool {
	if e.info == nil {
		return !isStringLit(x.X) && !isStringLit(x.Y)
	}
	return e.basic(x.X, types.IsNumeric) && e.basic(x.Y, types.IsNumeric)
}

func (e *enumerator) basic(x ast.Expr, flag types.BasicInfo) bool {
	if e.info == nil {
		return true
	}
	tv, ok := e.info.Types[x]
	if !ok || tv.Type == nil {
		return true
	}
	b, ok := tv.Type.Underlying().(*types.Basic)
	return ok && b.Info()&flag != 0
}

func isStringLit(x ast.Expr) bool {
	lit, ok := x.(*ast.BasicLit)
	return ok && lit.Kind == token.STRING
}

func (e *enumerator) token(pos token.Pos, from, to token.Token, op Operator) {
	e.add(op, pos, pos+token.Pos(len(from.String())), to.String())
}

func (e *enumerator) off(p token.Pos) int { return e.fset.Position(p).Offset }

func (e *enumerator) add(op Operator, from, to token.Pos, repl string) {
	if !e.ops[op] {
		return
	}
	pos := e.fset.Position(from)
	m := Mutant{
		File: e.rel, FileHash: e.hash, Line: pos.Line, Col: pos.Column, Operator: op,
		Start: pos.Offset, End: e.off(to), Mutated: repl, Func: e.fn, node: e.node,
	}
	m.Original = string(e.src[m.Start:m.End])
	if len(e.logOnly) > 0 {
		m.SkipReason = "logging only"
	}
	m.ID = mutantID(&m)
	e.out = append(e.out, m)
}
