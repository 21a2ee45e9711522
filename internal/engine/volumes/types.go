package volumes

// CreateRequest names a new volume and its quota (0 = the default).
type CreateRequest struct {
	Name      string
	SizeBytes int64
	Inodes    int64
}
