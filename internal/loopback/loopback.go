// Package loopback guards the HTTP servers the tools open on the loopback interface
// (idemctl serve's function URL, idemctl gateway, the fault proxy, localfn's servers).
// They do not authenticate: being on loopback keeps other machines out, and Guard keeps
// out the web pages a developer's browser runs. A page whose name re-resolves to
// 127.0.0.1 (DNS rebinding) is same-origin with the port but sends its own name as Host:
// answered 421. A cross-site request that changes state (a page's form or fetch POST,
// text/plain needing no CORS preflight) is refused by Go's CrossOriginProtection from
// its Sec-Fetch-Site or Origin header: 403.
package loopback

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Guard serves h on ln's requests whose Host is ln's address and port, or "localhost"
// and that port, and that are not cross-site state changes.
func Guard(ln net.Listener, h http.Handler) http.Handler {
	hosts := []string{ln.Addr().String()}
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		hosts = append(hosts, "localhost:"+strconv.Itoa(a.Port))
	}
	return onlyHosts(hosts, http.NewCrossOriginProtection().Handler(h))
}

// onlyHosts serves h to the requests whose Host is one of hosts, and 421 to the others.
func onlyHosts(hosts []string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, host := range hosts {
			if strings.EqualFold(r.Host, host) {
				h.ServeHTTP(w, r)
				return
			}
		}
		b, _ := json.Marshal(map[string]string{"Message": fmt.Sprintf(
			"Host %q is not this server's address (%s): a local server answers loopback requests to its own address only", r.Host, strings.Join(hosts, " or "))})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMisdirectedRequest)
		_, _ = w.Write(b)
	})
}
