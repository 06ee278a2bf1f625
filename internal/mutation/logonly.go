package mutation

import (
	"go/ast"
	"strings"
)

// logMethods are the methods of a logger (log/slog's and the like) whose calls only log.
var logMethods = map[string]bool{
	"Log": true, "LogAttrs": true, "Debug": true, "DebugContext": true, "Info": true, "InfoContext": true,
	"Warn": true, "WarnContext": true, "Error": true, "ErrorContext": true, "Printf": true, "Println": true,
}

// logOnly reports whether a statement only builds or writes a log line: a simple
// statement that names the log/slog package or calls a logger's method (a receiver named
// log or logger), or a block, if or for statement all of whose statements only log.
// Mutants inside one change what is logged, which no promise of the library covers (the
// operator's log lines are checked by tests of their own, not by the oracle), so they are
// listed as skipped and not run.
func logOnly(s ast.Stmt) bool {
	switch x := s.(type) {
	case *ast.BlockStmt:
		return allLogOnly(x.List)
	case *ast.IfStmt:
		if !allLogOnly(x.Body.List) {
			return false
		}
		if x.Else == nil {
			return true
		}
		return logOnly(x.Else)
	case *ast.ForStmt:
		return allLogOnly(x.Body.List)
	case *ast.RangeStmt:
		return allLogOnly(x.Body.List)
	case *ast.ExprStmt, *ast.AssignStmt, *ast.DeclStmt:
		return mentionsLogging(x)
	}
	return false
}

func allLogOnly(list []ast.Stmt) bool {
	if len(list) == 0 {
		return false
	}
	for _, s := range list {
		if !logOnly(s) {
			return false
		}
	}
	return true
}

func mentionsLogging(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(c ast.Node) bool {
		if found {
			return false
		}
		sel, ok := c.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == "slog" {
			found = true
			return false
		}
		if logMethods[sel.Sel.Name] && isLoggerName(lastName(sel.X)) {
			found = true
			return false
		}
		return true
	})
	return found
}

func isLoggerName(name string) bool {
	n := strings.ToLower(name)
	return n == "log" || n == "logger" || strings.HasSuffix(n, "logger")
}
