package store

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// eachUnicodeDataLine calls each with the fields (split at ";", trimmed) of
// every data line of testdata/name, a file of Unicode's data format as
// unicode.org publishes it (comments after "#", blank lines skipped), and the
// line itself for messages; it fails the test when the file cannot be read.
func eachUnicodeDataLine(t *testing.T, name string, each func(fields []string, line string)) {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		data, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(data) == "" {
			continue
		}
		fields := strings.Split(data, ";")
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		each(fields, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
