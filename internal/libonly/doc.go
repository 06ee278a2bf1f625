// Package libonly has no code of its own. Its test proves that the main of
// docs/library.md, the library used alone, builds as a module of its own that requires
// this one: it runs the page's build commands, as written, on the page's code block.
package libonly
