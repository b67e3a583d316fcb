// Package bytesize reads byte counts as people type them (flags such as
// --limit-rate and --chunk-size, rule files, ctr's output) and prints them
// for humans, so every command accepts and shows sizes the same way.
package bytesize
