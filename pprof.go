package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// servePprof serves net/http/pprof on a listener of its own at addr
// (PPROF_ADDR), never on the public HTTP_ADDR, and returns the function that
// closes it. The handlers are registered on a mux of this listener only (the
// public handler has its own mux and never falls back to http.DefaultServeMux).
// The server has no write timeout, so /debug/pprof/profile?seconds=N and
// /debug/pprof/trace run for as long as asked.
func servePprof(addr string, log *slog.Logger) (closeFn func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on PPROF_ADDR=%s (set PPROF_ADDR to another address, or unset it): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // and the named profiles: heap, goroutine, allocs, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() { _ = srv.Serve(ln) }()
	log.Info("pprof listening", "addr", ln.Addr().String())
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		log.Warn("pprof is served on a non-loopback address: whoever reaches it reads the process's stacks and profiles",
			"addr", ln.Addr().String())
	}
	return func() { _ = srv.Close() }, nil
}
