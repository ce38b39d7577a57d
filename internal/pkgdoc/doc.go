// Package pkgdoc holds a test that every package of the module explains
// itself with a package doc comment.
package pkgdoc
