package up

import (
	"path/filepath"

	"github.com/podbus/podbus/internal/secretbox"
)

// EncryptionKeyFile, in the data directory, holds the key sealing Secrets at rest (created on first
// start, mode 0600); the API seals with it and the real node's agent opens the Secrets its pods mount.
const EncryptionKeyFile = "encryption.key"

// secretBox loads (or first creates) the data directory's encryption key.
func secretBox(cfg Config) (*secretbox.Box, error) {
	return secretbox.LoadOrCreate(filepath.Join(cfg.DataDir, EncryptionKeyFile))
}
