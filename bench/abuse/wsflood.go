package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// wsMessageFlood opens 200 anonymous WebSockets (one client: its network's
// SUBSCRIPTION_MAX_PER_CLIENT) and sends on each, for Duration, a ping and a
// complete of an id that runs nothing, again and again, as fast as the server
// reads them: messages the server reads, decodes and (a ping) answers
// without a turn or a budget to pay. Each connection acknowledged counts a
// request (101), and so does each pong (two messages read); a note gives the
// server's CPU over the attack, in cores and per message read (the row's CPU
// column would round microseconds to 0.0 ms).
//
// The connections are raw (floodConn): a WebSocket library writes a message
// a system call, and the harness, which runs the victim too, spent more CPU
// writing 400,000 of them a second than the server spent reading them.
func wsMessageFlood(ctx context.Context, h *harness, o *outcome) error {
	addr := strings.TrimPrefix(h.srv.URL(), "http://")
	var conns []*floodConn
	defer func() {
		for _, c := range conns {
			_ = c.conn.Close()
		}
	}()
	for range h.size(200) {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		c, status, body, err := dialFlood(dctx, addr)
		dcancel()
		if status != 0 && status != http.StatusSwitchingProtocols {
			o.answer(status, body, nil)
			continue
		}
		o.answer(http.StatusSwitchingProtocols, nil, err)
		if err == nil {
			conns = append(conns, c)
		}
	}
	// A batch of ping and complete frames, written a batch a system call.
	var batch []byte
	perBatch := int64(0)
	for len(batch) < 32<<10 {
		batch = appendFrame(batch, 0x1, []byte(`{"type":"ping"}`))
		batch = appendFrame(batch, 0x1, []byte(`{"type":"complete","id":"nothing"}`))
		perBatch += 2
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	var sent atomic.Int64
	cpu0, start := h.serverCPU(), time.Now()
	for _, c := range conns {
		stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Now()) })
		wg.Go(func() { // reads the pongs, answers the server's pings
			defer stop()
			for {
				op, payload, err := c.readFrame()
				switch {
				case err != nil:
					if ctx.Err() == nil {
						o.answer(0, nil, err)
					}
					return
				case op == 0x8: // the server closed it
					code := "closed"
					if len(payload) >= 2 {
						code = fmt.Sprintf("closed %d", binary.BigEndian.Uint16(payload))
					}
					o.answered(code)
					return
				case bytes.Contains(payload, []byte(`"pong"`)):
					o.answered("pong")
				case bytes.Contains(payload, []byte(`"ping"`)):
					_ = c.write(appendFrame(nil, 0x1, []byte(`{"type":"pong"}`)))
				}
			}
		})
		wg.Go(func() { // sends back to back, as fast as the server reads
			for ctx.Err() == nil {
				if c.write(batch) != nil {
					return
				}
				sent.Add(perBatch)
			}
		})
	}
	<-ctx.Done()
	cpu, took := h.serverCPU()-cpu0, time.Since(start)
	wg.Wait()
	o.mu.Lock()
	pongs := o.answers["pong"]
	o.mu.Unlock()
	perMessage := "no pong"
	if pongs > 0 {
		perMessage = fmt.Sprintf("%.1f µs per message read (2 per pong; the victim's requests included)",
			float64(cpu.Microseconds())/float64(2*pongs))
	}
	o.note("%d connections sent %d messages (pings and completes) in %s, %d pongs received (%.0f messages read a second); "+
		"server CPU %.1f s (%.2f cores), %s", len(conns), sent.Load(), took.Round(time.Second), pongs,
		float64(2*pongs)/took.Seconds(), cpu.Seconds(), cpu.Seconds()/max(took.Seconds(), 1e-3), perMessage)
	return nil
}

// floodConn is a graphql-transport-ws connection written by hand: frames
// built once and written in batches.
type floodConn struct {
	conn net.Conn
	r    *bufio.Reader
	mu   sync.Mutex // one write at a time: a batch, or a pong
}

// dialFlood opens a WebSocket to addr's /query with the graphql-transport-ws
// subprotocol and sends connection_init; it returns the connection once
// acknowledged, or the status and body of an upgrade refused, or an error.
func dialFlood(ctx context.Context, addr string) (*floodConn, int, []byte, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c := &floodConn{conn: conn, r: bufio.NewReader(conn)}
	fail := func(status int, body []byte, err error) (*floodConn, int, []byte, error) {
		_ = conn.Close()
		return nil, status, body, err
	}
	_, err = io.WriteString(conn, "GET /query HTTP/1.1\r\nHost: "+addr+"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n")
	if err != nil {
		return fail(0, nil, err)
	}
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return fail(0, nil, err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(res.Body)
		return fail(res.StatusCode, body, nil)
	}
	if err := c.write(appendFrame(nil, 0x1, []byte(`{"type":"connection_init"}`))); err != nil {
		return fail(0, nil, err)
	}
	_, ack, err := c.readFrame()
	if err == nil && !bytes.Contains(ack, []byte(`"connection_ack"`)) {
		err = fmt.Errorf("connection_init answered %s", ack)
	}
	if err != nil {
		return fail(0, nil, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return c, http.StatusSwitchingProtocols, nil, nil
}

// appendFrame appends to b a client's frame of opcode op (0x1: text) with
// payload, masked with the key 0 (the payload as it is; RFC 6455 lets the
// client choose any key), of less than 126 bytes.
func appendFrame(b []byte, op byte, payload []byte) []byte {
	b = append(b, 0x80|op, 0x80|byte(len(payload)), 0, 0, 0, 0)
	return append(b, payload...)
}

func (c *floodConn) write(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.conn.Write(b)
	return err
}

// readFrame reads one frame of the server (unmasked, never fragmented by
// TaskFlow's small answers).
func (c *floodConn) readFrame() (op byte, payload []byte, err error) {
	var head [2]byte
	if _, err = io.ReadFull(c.r, head[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(head[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		_, err = io.ReadFull(c.r, l[:])
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		_, err = io.ReadFull(c.r, l[:])
		n = binary.BigEndian.Uint64(l[:])
	}
	if err != nil {
		return 0, nil, err
	}
	if n > 1<<20 {
		return 0, nil, errors.New("a frame over 1 MiB")
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(c.r, payload)
	return head[0] & 0x0f, payload, err
}
