package sim

import "github.com/vmbusd/vmbusd/sim/bus"

// The bus's names, as the callers of package sim know them (package
// sim/bus documents each).

type (
	Config          = bus.Config
	Device          = bus.Device
	DeviceConfig    = bus.DeviceConfig
	Service         = bus.Service
	Session         = bus.Session
	Channel         = bus.Channel
	SubchannelOffer = bus.SubchannelOffer
	Echo            = bus.Echo
	Route           = bus.Route
	Profile         = bus.Profile
	Fault           = bus.Fault
	Faults          = bus.Faults
	MemoryModel     = bus.MemoryModel
)

const (
	DefaultRingSize       = bus.DefaultRingSize
	DefaultRecvBuffer     = bus.DefaultRecvBuffer
	DefaultSendBuffer     = bus.DefaultSendBuffer
	DriverUIO             = bus.DriverUIO
	DriverNetvsc          = bus.DriverNetvsc
	DriverNone            = bus.DriverNone
	DefaultGuestMemSize   = bus.DefaultGuestMemSize
	GuestMemPath          = bus.GuestMemPath
	EchoSubchannelRequest = bus.EchoSubchannelRequest

	ProfileLegacy  = bus.ProfileLegacy
	Profile6_10    = bus.Profile6_10
	Profile6_16    = bus.Profile6_16
	Profile6_18    = bus.Profile6_18
	DefaultProfile = bus.DefaultProfile

	GuestMemFile = bus.GuestMemFile
	GuestMemProc = bus.GuestMemProc

	FaultCorruptWriteIndex  = bus.FaultCorruptWriteIndex
	FaultBadLen8            = bus.FaultBadLen8
	FaultBadOffset8         = bus.FaultBadOffset8
	FaultBadType            = bus.FaultBadType
	FaultBadFlags           = bus.FaultBadFlags
	FaultBadRanges          = bus.FaultBadRanges
	FaultSpuriousInterrupts = bus.FaultSpuriousInterrupts
	FaultMissingInterrupts  = bus.FaultMissingInterrupts
	FaultStopDraining       = bus.FaultStopDraining
	FaultSlowHost           = bus.FaultSlowHost
	FaultSplitSubchannelID  = bus.FaultSplitSubchannelID
)

// ErrRootInUse is bus.ErrRootInUse.
var ErrRootInUse = bus.ErrRootInUse

// Profiles lists the kernel profiles (bus.Profiles).
func Profiles() []Profile { return bus.Profiles() }

// ParseProfile is bus.ParseProfile.
func ParseProfile(s string) (Profile, error) { return bus.ParseProfile(s) }

// AllFaults is bus.AllFaults.
func AllFaults() []Fault { return bus.AllFaults() }

// ParseFault is bus.ParseFault.
func ParseFault(s string) (Fault, error) { return bus.ParseFault(s) }

// ParseMemoryModel is bus.ParseMemoryModel.
func ParseMemoryModel(s string) (MemoryModel, error) { return bus.ParseMemoryModel(s) }
