//go:build !(cgo && linux)

package gpu

// DiscoverSystem always fails without cgo on Linux: go-nvml does not build
// there, so this binary can only run CPU work.
func DiscoverSystem() ([]Device, error) {
	return nil, ErrUnavailable
}

// SystemDriverVersion always fails without cgo on Linux; see DiscoverSystem.
func SystemDriverVersion() (string, error) {
	return "", ErrUnavailable
}

// SampleSystem always fails without cgo on Linux; see DiscoverSystem.
func SampleSystem() ([]Usage, error) { return nil, ErrUnavailable }
