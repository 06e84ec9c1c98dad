package audit

// WithReadBack has VerifyChain pass what it reads through f first: it stands for a log whose
// messages an administrator rearranged, which the server's API does not allow.
func WithReadBack(o ChainOptions, f func(msgs []RawMsg, digests []Digest)) ChainOptions {
	o.readBack = f
	return o
}
