package bus

import (
	"net"
	"strconv"
	"strings"
)

func splitHostPort(hp string) (string, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return h, port, err
}

func joinComma(s []string) string { return strings.Join(s, ",") }
