package natsjs

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// CheckURLs checks a NATS server URL, or a comma-separated list of them,
// the way the client will read it, so that a malformed one is a setting
// error rather than a server that seems down.
func CheckURLs(list string) error {
	n, ws := 0, false
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		s := raw
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("%q is not a URL: %v", raw, errors.Unwrap(err))
		}
		isWS := false
		switch u.Scheme {
		case "nats", "tls":
		case "ws", "wss":
			isWS = true
		default:
			return fmt.Errorf("%q: the scheme must be nats, tls, ws or wss", raw)
		}
		if n > 0 && isWS != ws {
			return fmt.Errorf("websocket (ws, wss) and plain (nats, tls) URLs cannot be mixed")
		}
		ws = isWS
		if u.Hostname() == "" {
			return fmt.Errorf("%q has no host, e.g. nats://nats:4222", raw)
		}
		if p := u.Port(); p != "" {
			if v, err := strconv.Atoi(p); err != nil || v < 1 || v > 65535 {
				return fmt.Errorf("%q: the port must be between 1 and 65535", raw)
			}
		}
		if !isWS && u.Path != "" && u.Path != "/" {
			return fmt.Errorf("%q has a path; a NATS URL is scheme://[user:password@]host[:port]", raw)
		}
		n++
	}
	if n == 0 {
		return errors.New("names no server, e.g. nats://nats:4222")
	}
	return nil
}
