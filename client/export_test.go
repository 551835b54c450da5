package client

// Queued returns the number of Take calls under policy that c holds
// queued, not yet sent (coalescer.queue).
func Queued(c *Client, policy string) int {
	q, ok := c.queues.Load(queueKey{opTake, policy})
	if !ok {
		return 0
	}
	co := q.(*coalescer)
	co.mu.Lock()
	defer co.mu.Unlock()
	return len(co.queue)
}
