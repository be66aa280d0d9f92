package series

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The rings survive a restart as one record per endpoint (the composition
// stores it): Snapshot encodes the endpoints changed since the last one,
// Restore puts an endpoint's back. The record is a JSON string (the store
// keeps JSON) of the rings' fixed-size binary form, deflated: a few KB.

const persistVersion = 1

// persisted is the binary form: every field fixed-size.
type persisted struct {
	Version           uint32
	HourCur, DayCur   int64
	HourHist, DayHist [2]hist // delay, execution of the open bucket
	Hour              [HourBuckets]slot
	Day               [DayBuckets]slot
}

// Snapshot encodes the rings of every endpoint changed since the last
// Snapshot (all of them when all is set), one at a time, and hands each
// record to save; they are then counted as saved.
func (s *Series) Snapshot(all bool, save func(endpointID string, rec []byte)) error {
	s.mu.Lock()
	var ids []string
	for id, r := range s.eps {
		if r.dirty || all {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	p := new(persisted) // one at a time: memory stays one endpoint's
	for _, id := range ids {
		s.mu.Lock()
		r := s.eps[id]
		if r == nil {
			s.mu.Unlock()
			continue
		}
		r.dirty = false
		*p = persisted{Version: persistVersion, HourCur: r.hour.cur, DayCur: r.day.cur,
			HourHist: [2]hist{r.hour.delay, r.hour.exec}, DayHist: [2]hist{r.day.delay, r.day.exec}}
		copy(p.Hour[:], r.hour.slots)
		copy(p.Day[:], r.day.slots)
		s.mu.Unlock()
		var buf bytes.Buffer
		zw, _ := flate.NewWriter(&buf, flate.BestSpeed)
		if err := binary.Write(zw, binary.LittleEndian, p); err != nil {
			return fmt.Errorf("encode series of %s: %w", id, err)
		}
		zw.Close()
		rec, _ := json.Marshal(base64.StdEncoding.EncodeToString(buf.Bytes()))
		save(id, rec)
	}
	return nil
}

// Restore puts back an endpoint's rings from a Snapshot record, unless
// it already has rings (what happened since the start wins).
func (s *Series) Restore(endpointID string, rec []byte) error {
	var b64 string
	if err := json.Unmarshal(rec, &b64); err != nil {
		return fmt.Errorf("series of %s: %w", endpointID, err)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return fmt.Errorf("series of %s: %w", endpointID, err)
	}
	var p persisted
	zr := flate.NewReader(bytes.NewReader(raw))
	// Bounded: one persisted value is read, whatever the record holds.
	if err := binary.Read(io.LimitReader(zr, int64(binary.Size(&p))), binary.LittleEndian, &p); err != nil {
		return fmt.Errorf("series of %s: %w", endpointID, err)
	}
	if p.Version != persistVersion {
		return fmt.Errorf("series of %s: %w", endpointID, errors.New("unknown version"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eps[endpointID] != nil {
		return nil
	}
	r := s.get(endpointID, true)
	if r == nil {
		return nil
	}
	r.hour.cur, r.day.cur = p.HourCur, p.DayCur
	r.hour.delay, r.hour.exec = p.HourHist[0], p.HourHist[1]
	r.day.delay, r.day.exec = p.DayHist[0], p.DayHist[1]
	copy(r.hour.slots, p.Hour[:])
	copy(r.day.slots, p.Day[:])
	return nil
}
