// Package cache tells the transfer daemon what a checkpoint file in the
// node-local cache is before it is copied to the parallel file system.
//
// Inspect identifies a file by its content (magic numbers and structure) as a
// SIONlib container, an FTI-FF checkpoint, a LIME/SciDAC (QIO) file or a plain
// file, validates it, and for SIONlib containers computes the exact byte
// ranges that hold data so the copy can leave the gaps as holes. A corrupt
// checkpoint yields a *FormatError naming the file, the format, the problem
// and, where it applies, the offset, so that it is never flushed as good.
//
// The file formats are those written by SIONlib 1.7.6 (file format versions
// 3 to 5), FTI 1.6 in FTI-FF mode and USQCD QIO on top of c-lime.
// Every length and count read from a file is checked against the file's real
// size before it sizes a buffer or bounds a loop, and long hashing passes
// honour context cancellation.
package cache
