//go:build ignore

// Command commonpasswords_gen writes commonpasswords.txt.gz, the list of
// common and breached passwords that new passwords are checked against, from
// a ranked list of passwords, most common first, one a line:
//
//	go run commonpasswords_gen.go SOURCE.txt
//
// It keeps the first 100,000 distinct entries, in rank order, that are at
// least MinPasswordLength characters once normalised the way CheckNewPassword
// normalises a password (NFKC, lower case; shorter ones are refused by length
// anyway), and writes them sorted, one a line, gzipped with no timestamp so
// the same source gives the same bytes. The source of the committed file and
// its licence are in docs (decision record of the password policy).
package main

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

const (
	keep      = 100000
	minLength = 8 // auth.MinPasswordLength
	out       = "commonpasswords.txt.gz"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run commonpasswords_gen.go SOURCE.txt")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(source string) error {
	f, err := os.Open(source)
	if err != nil {
		return err
	}
	defer f.Close()
	seen := map[string]bool{}
	var list []string
	sc := bufio.NewScanner(f)
	for sc.Scan() && len(list) < keep {
		line := sc.Text()
		if !utf8.ValidString(line) {
			continue
		}
		p := strings.ToLower(norm.NFKC.String(line))
		if utf8.RuneCountInString(p) < minLength || strings.ContainsRune(p, '\n') || seen[p] {
			continue
		}
		seen[p] = true
		list = append(list, p)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	slices.Sort(list)
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	for _, p := range list {
		if _, err := zw.Write([]byte(p + "\n")); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	fmt.Printf("%s: %d passwords\n", out, len(list))
	return w.Close()
}
