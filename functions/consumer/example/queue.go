package example

import (
	"errors"
	"net/url"
	"strings"
)

// CheckFIFOQueueURL returns an error, worded to follow the URL in a message, unless u is
// an http(s) URL of a FIFO queue. An example's outbound messages rely on
// MessageDeduplicationId, which only FIFO queues have, and FIFO queue names end in
// ".fifo".
func CheckFIFOQueueURL(u string) error {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
		return errors.New("is not an http(s) queue URL")
	}
	if !strings.HasSuffix(p.Path, ".fifo") {
		return errors.New("is not a FIFO queue (name must end in .fifo)")
	}
	return nil
}
