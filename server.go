// Command taskflow is the TaskFlow GraphQL API server.
package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"taskflow/audit"
	"taskflow/httpapi"
	"taskflow/store"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	if err := run(log); err != nil {
		log.Error("taskflow stopped", "err", err)
		os.Exit(1)
	}
}

// run starts the server and blocks until SIGTERM or SIGINT.
func run(log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	addr := os.Getenv("HTTP_ADDR")
	if addr == "" {
		addr = ":8080"
	}
	db, err := store.Open(ctx, os.Getenv("DATABASE_URL"), log)
	if err != nil {
		return err
	}
	defer db.Close()
	retention, err := audit.ParseRetention(os.Getenv("AUDIT_RETENTION"))
	if err != nil {
		return err
	}
	go db.RunAuditMaintenance(ctx, retention, 6*time.Hour)
	proxies, err := httpapi.ParseProxies(os.Getenv("TRUSTED_PROXIES"))
	if err != nil {
		return err
	}
	h := httpapi.NewHandler(httpapi.Options{DB: db, Log: log, TrustedProxies: proxies})
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("listening", "addr", addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
