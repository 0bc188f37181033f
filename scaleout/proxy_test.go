package scaleout_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// tcpProxy forwards a loopback port to a target; cut closes the port and every
// connection through it, restore opens the same port again.
type tcpProxy struct {
	t      testing.TB
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
}

// newProxy starts a proxy to target on a free port; it is closed when the test ends.
func newProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{t: t, addr: freeAddr(t), target: target, conns: map[net.Conn]struct{}{}}
	p.restore()
	t.Cleanup(p.cut)
	return p
}

// restore listens again on the proxy's port.
func (p *tcpProxy) restore() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for range 200 { // the port of a just-closed listener can take a moment to free
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("proxy listen %s: %v", p.addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go p.accept(ln)
}

func (p *tcpProxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.ln != ln { // cut meanwhile
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.conns[up] = struct{}{}
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *tcpProxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// cut stops listening and closes every connection through the proxy.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// open returns the number of client connections open through the proxy.
func (p *tcpProxy) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}
