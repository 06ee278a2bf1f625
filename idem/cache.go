package idem

import (
	"container/list"
	"sync"
	"time"
)

// cache is a bounded LRU of COMPLETED records, so a warm Lambda container answers a
// repeat without a round trip. It never holds IN_PROGRESS or FAILED records.
type cache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used
	items map[string]*list.Element
}

type cached struct {
	key         string
	response    []byte
	payloadHash string
	expiresAt   time.Time
}

func newCache(max int) *cache {
	if max <= 0 {
		return nil
	}
	return &cache{max: max, order: list.New(), items: make(map[string]*list.Element, max)}
}

// get returns the entry for key unless it is missing or expired at now.
func (c *cache) get(key string, now time.Time) (cached, bool) {
	if c == nil {
		return cached{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return cached{}, false
	}
	e := el.Value.(*cached)
	if !e.expiresAt.IsZero() && e.expiresAt.Before(now) {
		c.order.Remove(el)
		delete(c.items, key)
		return cached{}, false
	}
	c.order.MoveToFront(el)
	return *e, true
}

func (c *cache) put(e cached) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[e.key]; ok {
		el.Value = &e
		c.order.MoveToFront(el)
		return
	}
	c.items[e.key] = c.order.PushFront(&e)
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*cached).key)
	}
}

func (c *cache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
