package peer

import "testing"

// PostGraphile's node-postgres gets the server, database and user of the
// harness's URL and its own application_name, without pgx's parameters
// (node-postgres reads sslmode=prefer as require, which a local server
// without TLS refuses).
func TestConnString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://postgres@127.0.0.1:5432/b?sslmode=prefer&pool_max_conns=16": "postgres://postgres@127.0.0.1:5432/b?application_name=postgraphile",
		"postgresql://u:p@h/b?sslmode=require":                                  "postgresql://u:p@h/b?application_name=postgraphile&sslmode=require",
	} {
		got, err := ConnString(in)
		if err != nil || got != want {
			t.Errorf("ConnString(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ConnString("host=h dbname=b"); err == nil {
		t.Error("ConnString of key=value pairs: no error")
	}
}
