/*
Copyright 2026 The isochron Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package crawl

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"
)

// conn is one keep-alive HTTP/1.1 connection. The crawl's scheduler writes each request
// to the socket itself, the moment it wakes, and the connection's own goroutine reads
// the answer, like httperf's single event loop: net/http would put two goroutine hand-offs
// (to a worker, then to the connection's write loop) between the scheduled instant and
// the wire, which showed up as send lateness next to httperf on a busy machine
// (docs/probes.md).
type conn struct {
	addr, host string
	// header is the request's extra header lines, each ending in CRLF.
	header  string
	timeout time.Duration
	c       net.Conn
	br      *bufio.Reader
	buf     []byte
}

func newConn(target *url.URL, timeout time.Duration, header string) (*conn, error) {
	if target.Scheme != "http" {
		return nil, fmt.Errorf("--target must be an http:// URL, got %q", target.String())
	}
	addr := target.Host
	if target.Port() == "" {
		addr = net.JoinHostPort(target.Hostname(), "80")
	}
	return &conn{addr: addr, host: target.Host, header: header, timeout: timeout}, nil
}

// send writes GET requestURI, dialling first if the connection is not open.
func (c *conn) send(requestURI string) error {
	if err := c.dial(); err != nil {
		return err
	}
	c.buf = append(c.buf[:0], "GET "...)
	c.buf = append(c.buf, requestURI...)
	c.buf = append(c.buf, " HTTP/1.1\r\nHost: "...)
	c.buf = append(c.buf, c.host...)
	c.buf = append(c.buf, "\r\nUser-Agent: rtprobe\r\n"...)
	c.buf = append(c.buf, c.header...)
	c.buf = append(c.buf, "\r\n"...)
	if err := c.c.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		c.close()
		return err
	}
	if _, err := c.c.Write(c.buf); err != nil {
		c.close()
		return err
	}
	return nil
}

// receive reads the response to the request send wrote. If the connection had been
// closed by the server while idle (no byte of a response), the request is sent once
// more on a new connection.
func (c *conn) receive(requestURI string, reused bool) (int, error) {
	status, err := c.read()
	if err != nil && reused && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)) {
		c.close()
		if err = c.send(requestURI); err == nil {
			status, err = c.read()
		}
	}
	if err != nil {
		c.close()
	}
	return status, err
}

// open reports whether the connection is open (a request on it reuses it).
func (c *conn) open() bool { return c.c != nil }

func (c *conn) dial() error {
	if c.c != nil {
		return nil
	}
	nc, err := net.DialTimeout("tcp", c.addr, c.timeout)
	if err != nil {
		return err
	}
	c.c, c.br = nc, bufio.NewReaderSize(nc, 4096)
	return nil
}

func (c *conn) read() (int, error) {
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.Close {
		c.close()
	}
	return resp.StatusCode, err
}

func (c *conn) close() {
	if c.c != nil {
		_ = c.c.Close()
		c.c, c.br = nil, nil
	}
}
