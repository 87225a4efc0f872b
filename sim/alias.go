package sim

import (
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/sim/hvsockhost"
	"github.com/vmbusd/vmbusd/sim/netvsp"
	"github.com/vmbusd/vmbusd/sim/vswitch"
)

// The names of package sim/bus, as the callers of package sim know them
// (package sim/bus documents each).

type (
	Channel         = bus.Channel
	Config          = bus.Config
	Device          = bus.Device
	DeviceConfig    = bus.DeviceConfig
	Echo            = bus.Echo
	Fault           = bus.Fault
	Faults          = bus.Faults
	MemoryModel     = bus.MemoryModel
	Profile         = bus.Profile
	Route           = bus.Route
	Service         = bus.Service
	Session         = bus.Session
	SubchannelOffer = bus.SubchannelOffer
)

const (
	DefaultGuestMemSize     = bus.DefaultGuestMemSize
	DefaultProfile          = bus.DefaultProfile
	DefaultRecvBuffer       = bus.DefaultRecvBuffer
	DefaultRingSize         = bus.DefaultRingSize
	DefaultSendBuffer       = bus.DefaultSendBuffer
	DriverNetvsc            = bus.DriverNetvsc
	DriverNone              = bus.DriverNone
	DriverUIO               = bus.DriverUIO
	EchoSubchannelRequest   = bus.EchoSubchannelRequest
	FaultBadFlags           = bus.FaultBadFlags
	FaultBadLen8            = bus.FaultBadLen8
	FaultBadOffset8         = bus.FaultBadOffset8
	FaultBadRanges          = bus.FaultBadRanges
	FaultBadType            = bus.FaultBadType
	FaultCorruptWriteIndex  = bus.FaultCorruptWriteIndex
	FaultMissingInterrupts  = bus.FaultMissingInterrupts
	FaultSlowHost           = bus.FaultSlowHost
	FaultSplitSubchannelID  = bus.FaultSplitSubchannelID
	FaultSpuriousInterrupts = bus.FaultSpuriousInterrupts
	FaultStopDraining       = bus.FaultStopDraining
	GuestMemFile            = bus.GuestMemFile
	GuestMemPath            = bus.GuestMemPath
	GuestMemProc            = bus.GuestMemProc
	Profile6_10             = bus.Profile6_10
	Profile6_16             = bus.Profile6_16
	Profile6_18             = bus.Profile6_18
	ProfileLegacy           = bus.ProfileLegacy
)

var (
	ErrRootInUse = bus.ErrRootInUse
)

// AllFaults is bus.AllFaults.
func AllFaults() []bus.Fault { return bus.AllFaults() }

// ParseFault is bus.ParseFault.
func ParseFault(s string) (bus.Fault, error) { return bus.ParseFault(s) }

// ParseMemoryModel is bus.ParseMemoryModel.
func ParseMemoryModel(s string) (bus.MemoryModel, error) { return bus.ParseMemoryModel(s) }

// ParseProfile is bus.ParseProfile.
func ParseProfile(s string) (bus.Profile, error) { return bus.ParseProfile(s) }

// Profiles is bus.Profiles.
func Profiles() []bus.Profile { return bus.Profiles() }

// The hv_sock host's defaults (package sim/hvsockhost documents each; its
// types are in assemble.go under their old names).

const (
	DefaultGuestOpenTimeout   = hvsockhost.DefaultGuestOpenTimeout
	DefaultHostConnectTimeout = hvsockhost.DefaultHostConnectTimeout
	DefaultHvSockBacklog      = hvsockhost.DefaultHvSockBacklog
	DefaultHvSockChunk        = hvsockhost.DefaultHvSockChunk
	DefaultMaxPendingConnects = hvsockhost.DefaultMaxPendingConnects
)

// The names of package sim/vswitch, as the callers of package sim know them
// (package sim/vswitch documents each).

type (
	FrameOffload    = vswitch.FrameOffload
	Generator       = vswitch.Generator
	GeneratorConfig = vswitch.GeneratorConfig
	GeneratorStats  = vswitch.GeneratorStats
	OffloadPort     = vswitch.OffloadPort
	Port            = vswitch.Port
	Reflector       = vswitch.Reflector
	TAP             = vswitch.TAP
	TAPConfig       = vswitch.TAPConfig
	Uplink          = vswitch.Uplink
)

// NewGenerator is vswitch.NewGenerator.
func NewGenerator(cfg vswitch.GeneratorConfig) *vswitch.Generator { return vswitch.NewGenerator(cfg) }

// NewReflector is vswitch.NewReflector.
func NewReflector() *vswitch.Reflector { return vswitch.NewReflector() }

// NewTAP is vswitch.NewTAP.
func NewTAP(cfg vswitch.TAPConfig) (*vswitch.TAP, error) { return vswitch.NewTAP(cfg) }

// PatchPorts is vswitch.PatchPorts.
func PatchPorts() (vswitch.Port, vswitch.Port) { return vswitch.PatchPorts() }

// The names of package sim/netvsp, as the callers of package sim know them
// (package sim/netvsp documents each).

type (
	ChannelCounters = netvsp.ChannelCounters
	NIC             = netvsp.NIC
	NICConfig       = netvsp.NICConfig
	NICFault        = netvsp.NICFault
	NICStats        = netvsp.NICStats
	VF              = netvsp.VF
	VFConfig        = netvsp.VFConfig
	VFEvent         = netvsp.VFEvent
	VFEventKind     = netvsp.VFEventKind
	VFKind          = netvsp.VFKind
	VFOrder         = netvsp.VFOrder
	VFScenario      = netvsp.VFScenario
	VFStats         = netvsp.VFStats
)

const (
	DefaultLinkSpacing          = netvsp.DefaultLinkSpacing
	DefaultLinkSpeed            = netvsp.DefaultLinkSpeed
	DefaultMaxQueues            = netvsp.DefaultMaxQueues
	DefaultNICQueueLen          = netvsp.DefaultNICQueueLen
	DefaultRecvSectionSize      = netvsp.DefaultRecvSectionSize
	DefaultSendSectionSize      = netvsp.DefaultSendSectionSize
	DefaultVFAway               = netvsp.DefaultVFAway
	DefaultVFDelay              = netvsp.DefaultVFDelay
	DefaultVFNoticeDelay        = netvsp.DefaultVFNoticeDelay
	DefaultVFRemoveDelay        = netvsp.DefaultVFRemoveDelay
	FlapCycles                  = netvsp.FlapCycles
	NICFaultBadIndication       = netvsp.NICFaultBadIndication
	NICFaultBadIndirectionTable = netvsp.NICFaultBadIndirectionTable
	NICFaultBadPPI              = netvsp.NICFaultBadPPI
	NICFaultDuplicateTID        = netvsp.NICFaultDuplicateTID
	NICFaultKeepalive           = netvsp.NICFaultKeepalive
	NICFaultLinkFlap            = netvsp.NICFaultLinkFlap
	NICFaultNVSPStatus          = netvsp.NICFaultNVSPStatus
	NICFaultNVSPType            = netvsp.NICFaultNVSPType
	NICFaultRNDISDataLength     = netvsp.NICFaultRNDISDataLength
	NICFaultRNDISLength         = netvsp.NICFaultRNDISLength
	NICFaultRNDISOffset         = netvsp.NICFaultRNDISOffset
	NICFaultRNDISQueryInfo      = netvsp.NICFaultRNDISQueryInfo
	NICFaultRNDISRequestID      = netvsp.NICFaultRNDISRequestID
	NICFaultRNDISStatus         = netvsp.NICFaultRNDISStatus
	NICFaultRNDISType           = netvsp.NICFaultRNDISType
	NICFaultRangeOutsideBuffer  = netvsp.NICFaultRangeOutsideBuffer
	NICFaultRecvFit             = netvsp.NICFaultRecvFit
	NICFaultRecvOffset          = netvsp.NICFaultRecvOffset
	NICFaultRecvSections        = netvsp.NICFaultRecvSections
	NICFaultRxDuringSetup       = netvsp.NICFaultRxDuringSetup
	NICFaultSectionIndex        = netvsp.NICFaultSectionIndex
	NICFaultSendSection         = netvsp.NICFaultSendSection
	NICFaultSubchannelFail      = netvsp.NICFaultSubchannelFail
	NICFaultSubchannelOvergrant = netvsp.NICFaultSubchannelOvergrant
	NICFaultTableDuringSync     = netvsp.NICFaultTableDuringSync
	NICFaultTxFail              = netvsp.NICFaultTxFail
	NICFaultUnknownCompletion   = netvsp.NICFaultUnknownCompletion
	NICFaultVFFlap              = netvsp.NICFaultVFFlap
	NICFaultXferPageSet         = netvsp.NICFaultXferPageSet
	RecvSectionFromMTU          = netvsp.RecvSectionFromMTU
	VFAssocFirst                = netvsp.VFAssocFirst
	VFAssociationFirst          = netvsp.VFAssociationFirst
	VFAssociationSent           = netvsp.VFAssociationSent
	VFFlap                      = netvsp.VFFlap
	VFGuestSwitchSynth          = netvsp.VFGuestSwitchSynth
	VFGuestSwitchVF             = netvsp.VFGuestSwitchVF
	VFHostSwitchSent            = netvsp.VFHostSwitchSent
	VFLinkDown                  = netvsp.VFLinkDown
	VFLinkUp                    = netvsp.VFLinkUp
	VFMANA                      = netvsp.VFMANA
	VFMellanox                  = netvsp.VFMellanox
	VFNetdevAdded               = netvsp.VFNetdevAdded
	VFNetdevFirst               = netvsp.VFNetdevFirst
	VFNetdevFirstScenario       = netvsp.VFNetdevFirstScenario
	VFNetdevRemoved             = netvsp.VFNetdevRemoved
	VFPCIAdded                  = netvsp.VFPCIAdded
	VFPCIRemoved                = netvsp.VFPCIRemoved
	VFRecovery                  = netvsp.VFRecovery
	VFScenarioCompleted         = netvsp.VFScenarioCompleted
	VFService                   = netvsp.VFService
	VFServiceStarted            = netvsp.VFServiceStarted
	VFSlowProbe                 = netvsp.VFSlowProbe
	VFSurprise                  = netvsp.VFSurprise
	VFWithdrawalSent            = netvsp.VFWithdrawalSent
)

// AllNICFaults is netvsp.AllNICFaults.
func AllNICFaults() []netvsp.NICFault { return netvsp.AllNICFaults() }

// AllVFScenarios is netvsp.AllVFScenarios.
func AllVFScenarios() []netvsp.VFScenario { return netvsp.AllVFScenarios() }

// ParseNICFault is netvsp.ParseNICFault.
func ParseNICFault(s string) (netvsp.NICFault, error) { return netvsp.ParseNICFault(s) }

// ParseVFKind is netvsp.ParseVFKind.
func ParseVFKind(s string) (netvsp.VFKind, error) { return netvsp.ParseVFKind(s) }

// ParseVFScenario is netvsp.ParseVFScenario.
func ParseVFScenario(s string) (netvsp.VFScenario, error) { return netvsp.ParseVFScenario(s) }

// Patch is netvsp.Patch.
func Patch(a *netvsp.NIC, b *netvsp.NIC) error { return netvsp.Patch(a, b) }
