package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
)

// The hash chain over AUDIT. Every message of the log (a batch is one message) gets a content digest
//
//	c_i = SHA-256(time || origin stream || origin seq || subject || headers, keys sorted || body)
//
// (each variable field length-prefixed) and a chained digest d_i = SHA-256(d_{i-1} || c_i), d_0 being
// zero. The content digests are independent of each other, so readers compute them on every core; only
// the short chaining step is sequential. The sealer (services/auditseal) publishes Blocks to AUDITSEAL:
// each covers a contiguous range of AUDIT sequences, lists every record's origin, subject and d_i, and is
// signed with an ed25519 key only the sealer holds. Whoever can rewrite AUDIT cannot re-sign the blocks.

// Digest is a SHA-256 digest.
type Digest [sha256.Size]byte

// Sentinel errors of the chain.
var (
	// ErrChainBroken is returned by VerifyChain (and a chain-verifying Replay) when the log does not
	// match its seals; the result names the first bad record.
	ErrChainBroken = errors.New("the audit log does not match its seals")
	// ErrBadBlock is returned when a seal block does not decode.
	ErrBadBlock = errors.New("malformed seal block")
	// ErrBadSignature is returned when a seal block's signature does not verify with its key.
	ErrBadSignature = errors.New("seal block signature does not verify")
	// ErrUntrustedKey is returned when a seal block is signed with a key the verifier was not given.
	ErrUntrustedKey = errors.New("seal block signed by an untrusted key")
)

// RawMsg is one message of the log as stored.
type RawMsg struct {
	Seq     uint64
	Time    time.Time
	Subject string
	Header  nats.Header
	Data    []byte
}

// Origin is the stream the message was sourced from and its sequence there.
func (m *RawMsg) Origin() (stream string, seq uint64, ok bool) {
	r := Record{Header: m.Header}
	return r.Origin()
}

// ContentDigest is c_i of m. buf is scratch space, returned for reuse.
func ContentDigest(m *RawMsg, buf []byte) (Digest, []byte) {
	stream, oseq, _ := m.Origin()
	b := binary.BigEndian.AppendUint64(buf[:0], uint64(m.Time.UnixNano()))
	b = appendLP(b, stream)
	b = binary.BigEndian.AppendUint64(b, oseq)
	b = appendLP(b, m.Subject)
	var keys [16]string
	ks := keys[:0]
	for k := range m.Header {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	b = binary.AppendUvarint(b, uint64(len(ks)))
	for _, k := range ks {
		vs := m.Header[k]
		b = appendLP(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendLP(b, v)
		}
	}
	h := sha256.New()
	b = binary.AppendUvarint(b, uint64(len(m.Data)))
	h.Write(b)
	h.Write(m.Data)
	var d Digest
	h.Sum(d[:0])
	return d, b
}

// ChainDigest is d_i from d_{i-1} and c_i.
func ChainDigest(prev, content Digest) Digest {
	var in [2 * sha256.Size]byte
	copy(in[:], prev[:])
	copy(in[sha256.Size:], content[:])
	return sha256.Sum256(in[:])
}

func appendLP(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// SealedRecord is what a block says of one record.
type SealedRecord struct {
	Origin    string
	OriginSeq uint64
	Subject   string
	Digest    Digest // d_i
}

// Block is one seal block: records From..From+len(Records)-1 of the AUDIT stream created at
// StreamCreated, chained onto Prev (the previous block's head, zero for the first).
type Block struct {
	Stream        string    // the sealed stream (AUDIT)
	StreamCreated time.Time // its creation time: a re-created stream has another
	MaxAge        time.Duration
	From          uint64 // first AUDIT sequence covered
	// Skipped says that the Skipped records before From were gone from AUDIT before they were sealed.
	Skipped  uint64
	Prev     Digest
	SealedAt time.Time
	Sealer   string
	Records  []SealedRecord
	Key      ed25519.PublicKey
	Sig      []byte
}

// To is the last sequence covered (From-1 for an empty block).
func (b *Block) To() uint64 { return b.From + uint64(len(b.Records)) - 1 }

// Head is the chained digest of the block's last record (Prev when it has none).
func (b *Block) Head() Digest {
	if len(b.Records) == 0 {
		return b.Prev
	}
	return b.Records[len(b.Records)-1].Digest
}

const blockMagic = "podbus-seal-v1\n"

// body encodes everything the signature covers.
func (b *Block) body() []byte {
	n := len(blockMagic) + 128 + len(b.Records)*(sha256.Size+40)
	out := make([]byte, 0, n)
	out = append(out, blockMagic...)
	out = appendLP(out, b.Stream)
	out = binary.BigEndian.AppendUint64(out, uint64(b.StreamCreated.UnixNano()))
	out = binary.BigEndian.AppendUint64(out, uint64(b.MaxAge))
	out = binary.BigEndian.AppendUint64(out, b.From)
	out = binary.BigEndian.AppendUint64(out, b.Skipped)
	out = append(out, b.Prev[:]...)
	out = binary.BigEndian.AppendUint64(out, uint64(b.SealedAt.UnixNano()))
	out = appendLP(out, b.Sealer)
	// Origins are few: named once, referred to by index.
	var origins []string
	idx := map[string]int{}
	for _, r := range b.Records {
		if _, ok := idx[r.Origin]; !ok {
			idx[r.Origin] = len(origins)
			origins = append(origins, r.Origin)
		}
	}
	out = binary.AppendUvarint(out, uint64(len(origins)))
	for _, o := range origins {
		out = appendLP(out, o)
	}
	out = binary.AppendUvarint(out, uint64(len(b.Records)))
	for _, r := range b.Records {
		out = binary.AppendUvarint(out, uint64(idx[r.Origin]))
		out = binary.AppendUvarint(out, r.OriginSeq)
		out = appendLP(out, r.Subject)
		out = append(out, r.Digest[:]...)
	}
	out = append(out, b.Key...)
	return out
}

// Sign sets the block's key and signature.
func (b *Block) Sign(key ed25519.PrivateKey) {
	b.Key = key.Public().(ed25519.PublicKey)
	b.Sig = ed25519.Sign(key, b.body())
}

// Encode returns the block as published: its body then the signature.
func (b *Block) Encode() []byte { return append(b.body(), b.Sig...) }

// DecodeBlock reads an encoded block and checks its signature against the key it names (whether that
// key is trusted is the caller's question).
func DecodeBlock(data []byte) (*Block, error) {
	if len(data) < len(blockMagic)+ed25519.PublicKeySize+ed25519.SignatureSize || string(data[:len(blockMagic)]) != blockMagic {
		return nil, fmt.Errorf("%w: no block header", ErrBadBlock)
	}
	d := decoder{b: data[len(blockMagic) : len(data)-ed25519.PublicKeySize-ed25519.SignatureSize]}
	var b Block
	b.Stream = d.str()
	b.StreamCreated = time.Unix(0, int64(d.u64())).UTC()
	b.MaxAge = time.Duration(d.u64())
	b.From = d.u64()
	b.Skipped = d.u64()
	copy(b.Prev[:], d.bytes(sha256.Size))
	b.SealedAt = time.Unix(0, int64(d.u64())).UTC()
	b.Sealer = d.str()
	origins := make([]string, d.uvarint())
	for i := range origins {
		if d.err != nil {
			break
		}
		origins[i] = d.str()
	}
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = errors.New("record count beyond the block")
	}
	if d.err == nil {
		b.Records = make([]SealedRecord, n)
	}
	for i := range b.Records {
		if d.err != nil {
			break
		}
		oi := d.uvarint()
		if oi >= uint64(len(origins)) {
			d.err = errors.New("origin index out of range")
			break
		}
		r := &b.Records[i]
		r.Origin = origins[oi]
		r.OriginSeq = d.uvarint()
		r.Subject = d.str()
		copy(r.Digest[:], d.bytes(sha256.Size))
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = errors.New("trailing bytes")
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadBlock, d.err)
	}
	end := len(data) - ed25519.SignatureSize
	b.Key = slices.Clone(data[end-ed25519.PublicKeySize : end])
	b.Sig = slices.Clone(data[end:])
	if !ed25519.Verify(b.Key, data[:end], b.Sig) {
		return &b, ErrBadSignature
	}
	return &b, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil || len(d.b) < n {
		if d.err == nil {
			d.err = errors.New("short block")
		}
		return make([]byte, n)
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u64() uint64 { return binary.BigEndian.Uint64(d.bytes(8)) }

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		if d.err == nil {
			d.err = errors.New("string beyond the block")
		}
		return ""
	}
	return string(d.bytes(int(n)))
}

// Key files of the sealer, in its data directory.
const (
	SealKeyFile    = "audit-seal.key" // PKCS #8 PEM, mode 0600
	SealPubKeyFile = "audit-seal.pub" // PKIX PEM, for `podbus audit verify --chain --pubkey`
)

// LoadOrCreateSealKey reads the sealer's private key from dir, generating it (and writing its public key
// beside it) on first use.
func LoadOrCreateSealKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, SealKeyFile)
	data, err := os.ReadFile(path)
	if err == nil {
		blk, _ := pem.Decode(data)
		if blk == nil {
			return nil, fmt.Errorf("seal key %s: not PEM", path)
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("seal key %s: %w", path, err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("seal key %s: not an ed25519 key", path)
		}
		return priv, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	// The public key first: a private key without it would be written again with another.
	if err := os.WriteFile(filepath.Join(dir, SealPubKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	if _, err := f.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	return priv, nil
}

// ReadPublicKeys reads every PEM public key in file (a sealer's audit-seal.pub, or several of them
// concatenated after a key change).
func ReadPublicKeys(file string) ([]ed25519.PublicKey, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []ed25519.PublicKey
	for {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			break
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("%s: not an ed25519 public key", file)
		}
		out = append(out, pub)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no PEM public key", file)
	}
	return out, nil
}
