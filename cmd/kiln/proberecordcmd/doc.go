// Package proberecordcmd is kiln probe-record, hidden: what kiln slim
// --format estargz runs inside its probe container to record the files
// the probe opens (slim.RecordOpens).
//
// NewCmdProbeRecord(f, runF): runF, when not nil, gets the parsed
// ProbeRecordOptions instead of the probe running.
package proberecordcmd
