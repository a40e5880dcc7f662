// Package storetest is the contract suite every store.Store implementation
// must pass. An implementation's own test calls Run with a function that
// opens a fresh, empty store; the suite then checks every sentence of the
// Store contract against it, tenant isolation and concurrency included.
package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Run runs the contract suite. Every subtest calls open for a new store that
// holds nothing but what every new store holds (the store.DefaultTenant
// tenant), runs in parallel with the others and closes its store when it
// ends, so open must not register a Close of its own.
//
// Timestamps are compared to the microsecond: an implementation may round
// nanoseconds away (PostgreSQL does) but must return UTC.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"DefaultTenantExists", testDefaultTenantExists},
		{"CreateTenantThenGetReturnsIt", testCreateTenantThenGet},
		{"CreateTenantRejectsDuplicateIDAndKeepsOriginal", testCreateTenantRejectsDuplicate},
		{"GetTenantReturnsNotFoundForAbsentID", testGetTenantNotFound},
		{"ListTenantsOrderedByCreatedAtThenID", testListTenantsOrdered},
		{"CreateRejectsEmptyIdentifiers", testCreateRejectsEmptyIdentifiers},
		{"CreateRejectsUnknownTenantAndStoresNothing", testCreateRejectsUnknownTenant},
		{"CreateSetsZeroCreatedAtToNow", testCreateSetsZeroCreatedAt},

		{"CreateAPIKeyThenLookupByHashReturnsIt", testCreateAPIKeyThenLookup},
		{"LookupAPIKeyReturnsNotFoundForUnknownHash", testLookupAPIKeyNotFound},
		{"CreateAPIKeyRejectsDuplicateIDAndStoresNothing", testCreateAPIKeyRejectsDuplicateID},
		{"CreateAPIKeyRejectsDuplicateHashAndStoresNothing", testCreateAPIKeyRejectsDuplicateHash},
		{"ListAPIKeysIsTenantScopedAndOrdered", testListAPIKeys},
		{"DeleteAPIKeyRemovesItOnce", testDeleteAPIKey},
		{"DeleteAPIKeyOfOtherTenantReturnsNotFound", testDeleteAPIKeyOtherTenant},

		{"CreateTemplateThenGetReturnsIt", testCreateTemplateThenGet},
		{"CreateTemplateRejectsDuplicateIDAndKeepsOriginal", testCreateTemplateRejectsDuplicate},
		{"TemplateIDsAreScopedPerTenant", testTemplateIDsPerTenant},
		{"GetTemplateReturnsNotFoundForAbsentAndOtherTenant", testGetTemplateNotFound},
		{"ListTemplatesIsTenantScopedAndOrdered", testListTemplates},
		{"DeleteTemplateRemovesItOnce", testDeleteTemplate},
		{"DeleteTemplateOfOtherTenantReturnsNotFound", testDeleteTemplateOtherTenant},

		{"CreateSandboxStoresVersionOne", testCreateSandboxVersionOne},
		{"CreateSandboxRejectsDuplicateIDAndStoresNothing", testCreateSandboxRejectsDuplicateID},
		{"CreateSandboxRejectsDuplicateNameAndStoresNothing", testCreateSandboxRejectsDuplicateName},
		{"CreateSandboxAllowsSameNameInAnotherTenant", testCreateSandboxSameNameOtherTenant},
		{"GetSandboxFindsByIDAndByName", testGetSandboxByIDAndName},
		{"GetSandboxPrefersIDOverName", testGetSandboxPrefersID},
		{"GetSandboxWithEmptyTenantMatchesAnyTenantByIDOnly", testGetSandboxEmptyTenant},
		{"GetSandboxReturnsNotFoundForAbsentAndOtherTenant", testGetSandboxNotFound},
		{"SandboxTimesRoundTripAsUTC", testSandboxTimesRoundTrip},
		{"SandboxOptionalTimesRoundTripNilAndSet", testSandboxOptionalTimes},
		{"SpecAndConfigRoundTripByteForByte", testSpecAndConfigBytes},
		{"UpdateSandboxStoresFieldsAndBumpsVersion", testUpdateSandbox},
		{"UpdateSandboxRejectsStaleVersionAndChangesNothing", testUpdateSandboxStale},
		{"UpdateSandboxReturnsNotFoundForAbsentAndOtherTenant", testUpdateSandboxNotFound},
		{"UpdateSandboxRejectsTakenNameAndChangesNothing", testUpdateSandboxTakenName},
		{"ListSandboxesOrderedByCreatedAtThenID", testListSandboxesOrdered},
		{"ListSandboxesExcludesDeletedUnlessAsked", testListSandboxesDeleted},
		{"ListSandboxesFiltersByStates", testListSandboxesStates},
		{"ListSandboxesIsTenantScopedAndEmptyTenantListsAll", testListSandboxesTenants},
		{"DeleteSandboxPurgesRecordAndFreesName", testDeleteSandbox},
		{"DeleteSandboxOfOtherTenantReturnsNotFound", testDeleteSandboxOtherTenant},
		{"ListsOfEmptyStoreAreEmpty", testEmptyLists},

		{"LeaseAddressIsStableAndLowestFree", testLeaseStableLowestFree},
		{"LeaseAddressSkipsNetworkGatewayAndBroadcast", testLeaseSkipsReserved},
		{"LeaseAddressesLeasesBothFamiliesAtOnce", testLeaseBothFamiliesAtOnce},
		{"LeaseAddressMovesIntoANewSubnet", testLeaseNewSubnet},
		{"LeaseAddressRefusesBadInputAndFullSubnet", testLeaseBadInputFull},
		{"ConcurrentLeasesNeverShareAnAddress", testLeaseConcurrent},
		{"CreateSandboxLeasesInItsTransaction", testCreateSandboxLeases},

		{"MeterIntervalOpensOncePerSandbox", testMeterOpenOnce},
		{"MeterCheckpointMovesOpenIntervalsForwardOnly", testMeterCheckpoint},
		{"MeterCloseNeverEndsBeforeCheckpoint", testMeterClose},
		{"MeterListFiltersAndOrders", testMeterList},
		{"StorageUsageAccumulatesPerDay", testStorageUsage},

		{"ConcurrentCreatesAndReadsAllSucceed", testConcurrentCreates},
		{"ConcurrentCreatesOfOneNameHaveOneWinner", testConcurrentSameName},
		{"ConcurrentUpdatesLoseNoIncrement", testConcurrentUpdates},

		{"PutCheckpointNumbersVersionsAndGetReturnsThem", testPutCheckpointVersions},
		{"PutCheckpointIfVersionMismatchConflictsAndStoresNothing", testPutCheckpointIfVersion},
		{"PutCheckpointKeepsAtMostKeepVersions", testPutCheckpointTrims},
		{"PutCheckpointRejectsBadInputAndStoresNothing", testPutCheckpointInvalid},
		{"CheckpointsOfAnotherTenantAreInvisible", testCheckpointTenantIsolation},
		{"CheckpointsOfAnotherSandboxOrAgentAreSeparate", testCheckpointSandboxIsolation},
		{"CheckpointSchemaIsStoredAndPassedToCheck", testCheckpointSchema},
		{"CheckpointCheckFailureStoresNothing", testCheckpointCheckFails},
		{"DeleteCheckpointRemovesEveryVersion", testDeleteCheckpoint},
		{"PurgingASandboxDeletesItsCheckpoints", testPurgeSandboxDeletesCheckpoints},
		{"ListCheckpointsOrderedByAgentThenName", testListCheckpointsOrdered},
		{"ConcurrentPutsWithIfVersionHaveOneWinnerPerVersion", testConcurrentCheckpointPuts},
		{"ConcurrentCreatesOfOneCheckpointHaveOneWinner", testConcurrentCheckpointCreates},
		{"CheckpointPolicyDefaultsAndRoundTrips", testCheckpointPolicy},
		{"CheckpointPolicyKeepTrimsHistory", testCheckpointPolicyKeep},
		{"CheckpointGuardsRunInsideTheWriteAndStopIt", testCheckpointGuards},
		{"SnapshotsRoundTripListInOrderAndOutliveTheirSandbox", testSnapshots},
		{"SnapshotsOfAnotherTenantAreAbsent", testSnapshotTenantIsolation},
		{"VolumesRoundTripByIDOrNameAndSoftDelete", testVolumes},
		{"VolumesOfAnotherTenantAreAbsent", testVolumeTenantIsolation},
		{"SecretsPutRotateListDelete", testSecretsPutRotateListDelete},
		{"SecretsRejectBadInputAndStoreNothing", testSecretsRejectBadInput},
		{"SecretsOfAnotherTenantAreAbsent", testSecretsOfAnotherTenantAreAbsent},
		{"QuotasSetGetAndReplace", testQuotasSetGetAndReplace},
		{"WarmPoolsSetListDeleteAndGoWithTheTenant", testWarmPools},
		{"StateBytesAddsUpTheTenantsState", testStateBytesAddsUpTheTenantsState},
		{"QuotasRejectBadInputAndStoreNothing", testQuotasRejectBadInputAndStoreNothing},
		{"QuotasBelongToOneTenantAndGoWithIt", testQuotasBelongToOneTenantAndGoWithIt},
		{"RetentionPolicyPutGetReplace", testRetentionPolicyPutGetReplace},
		{"RetentionPolicyRejectsBadInputAndStoresNothing", testRetentionPolicyRejectsBadInput},
		{"RetentionWarningsOncePerSubjectActionAndDue", testRetentionWarningsOncePerSubjectActionAndDue},
		{"RetentionGoesWithTheTenant", testRetentionGoesWithTheTenant},
		{"SessionThreadsAndRunsRoundTripAndEndOnce", testSessionThreadsAndRuns},
		{"AppendEventsNumbersSeqsAndIsIdempotent", testAppendEventsNumbersAndIsIdempotent},
		{"AppendEventsBatchIsAllOrNothing", testAppendEventsBatchIsAllOrNothing},
		{"ConcurrentAppendsGetConsecutiveSeqs", testConcurrentAppendsGetConsecutiveSeqs},
		{"SessionsOfAnotherTenantAreAbsent", testSessionsOfAnotherTenantAreAbsent},
		{"ResumeReportsSafePointAndInDoubtIntents", testResumeReportsSafePointAndInDoubtIntents},
		{"RetentionKeepsLastNAndProtectedEvents", testRetentionKeepsLastNAndProtectedEvents},
		{"PurgingASandboxDeletesItsSessions", testPurgingASandboxDeletesItsSessions},
		{"TenantsSuspendAndDeleteWithTheirKeys", testTenantsSuspendAndDelete},
		{"DeleteTenantRefusedWhileItHasSandboxes", testDeleteTenantRefusedWhileItHasSandboxes},
		{"APIKeysKeepRoleScopeAndExpiry", testAPIKeysKeepRoleScopeAndExpiry},
		{"DaemonEventsAppendListAndFilter", testDaemonEventsAppendListAndFilter},
		{"SandboxChangeAndItsEventCommitTogether", testSandboxChangeAndItsEventCommitTogether},
		{"DaemonEventIDsNeverReusedAfterPrune", testDaemonEventIDsNeverReusedAfterPrune},
		{"ConcurrentDaemonEventAppendsListInIDOrder", testConcurrentDaemonEventAppendsListInIDOrder},
		{"WebhooksCRUDCursorAndTenantIsolation", testWebhooksCRUDCursorAndTenantIsolation},
		{"PurgeTenantEventsLeavesOtherTenants", testPurgeTenantEventsLeavesOtherTenants},
		{"AuditAppendThenListAndFilter", testAuditAppendAndList},
		{"AuditAppendRejectsGapsDuplicatesAndWrongPrevHash", testAuditAppendRejectsBrokenChain},
		{"AuditCheckpointsRoundTripAndRejectDuplicates", testAuditCheckpoints},
		{"AuditPruneKeepsChainAnchoredAtACheckpoint", testAuditPrune},
		{"AuditEntriesSurviveSandboxPurge", testAuditSurvivesPurge},
		{"AuditConcurrentAppendsNeverForkTheChain", testAuditConcurrentAppends},
		{"TasksCreateGetAndTransition", testTasksCreateGetAndTransition},
		{"ListTasksFiltersByStateAndCreatedAfterAndPages", testListTasksFiltersAndPages},
		{"ConcurrentTaskTransitionsWithIfStateHaveOneWinner", testConcurrentTaskTransitionsHaveOneWinner},
		{"ObservationsAppendInOrderAndListAfterACursor", testObservationsAppendAndList},
		{"PruneObservationsKeepsTheNewestAndTheYoung", testPruneObservationsKeepsTheNewestAndTheYoung},
		{"ConcurrentObservationAppendsGetConsecutiveSeqs", testConcurrentObservationAppendsGetConsecutiveSeqs},
		{"KVPutGetListByPrefixAndDeleteWithIfVersion", testKVPutGetListDelete},
		{"ConcurrentKVPutsWithIfVersionHaveOneWinnerPerVersion", testConcurrentKVPutsHaveOneWinnerPerVersion},
		{"StructuredStateOfAnotherTenantIsAbsent", testStructuredStateOfAnotherTenantIsAbsent},
		{"PurgingASandboxDeletesItsStructuredState", testPurgingASandboxDeletesItsStructuredState},
		{"SchedulesRoundTripUpdateListAndDelete", testSchedulesRoundTripUpdateListDelete},
		{"SchedulesRejectBadInputAndStoreNothing", testSchedulesRejectBadInput},
		{"SchedulesOfAnotherTenantAreAbsent", testSchedulesOfAnotherTenantAreAbsent},
		{"DueSchedulesAreEnabledOverdueAndOrdered", testDueSchedulesAreEnabledAndOverdue},
		{"PurgingASandboxOrTenantDeletesItsSchedules", testPurgingDeletesSchedules},
		{"BudgetsCreateGetListUpdateDelete", testBudgetsCRUD},
		{"BudgetsRejectBadInputAndStoreNothing", testBudgetsRejectBadInput},
		{"BudgetStateAndSettingsAreWrittenApart", testBudgetStateAndSettingsApart},
		{"BudgetsGoWithTheirSandboxAndTenant", testBudgetsGoWithSandboxAndTenant},

		{"QuotaRisesAdmitPendingAndExpire", testQuotaRisesAdmitPendingAndExpire},
		{"QuotaRisesRacingForTheLastSlotHaveOneWinner", testQuotaRisesRacingForTheLastSlotHaveOneWinner},
		{"QuotaRisesOfANodeAreDeletedTogether", testQuotaRisesOfANodeAreDeletedTogether},

		{"NodesRegisterRefreshAndKeepTheirState", testNodesRegisterRefreshAndKeepState},
		{"NodesHeartbeatWithoutTimesIsNow", testNodesHeartbeatZeroTimesMeanNow},
		{"NodesRejectBadInputAndStoreNothing", testNodesRejectBadInputAndStoreNothing},
		{"NodesEmptyRegistryListsNone", testNodesEmptyRegistryListsNone},
		{"OwnershipAcquireRenewTakeoverAndRelease", testOwnershipAcquireRenewTakeover},
		{"OwnershipRacingAcquiresHaveOneWinner", testOwnershipRacingAcquiresHaveOneWinner},
		{"OwnershipFencedWritesRefusedAfterTakeover", testOwnershipFencedWrites},
		{"OwnershipExpireANodesLeasesTogether", testOwnershipExpireNodeTogether},
		{"OwnershipFencedWritesRacingATakeoverNeverLandAfterIt", testOwnershipFencedWritesRacingATakeover},
		{"OwnershipRejectsBadInputAndStoresNothing", testOwnershipRejectsBadInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close store: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// at returns a fixed instant plus sec seconds, with a nanosecond part and a
// non-UTC location so that round trips have something to lose.
func at(sec int) time.Time {
	return time.Date(2026, 11, 30, 12, 0, sec, 123456789, time.FixedZone("CET", 3600))
}

func ptr(t time.Time) *time.Time { return &t }

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

func noErr(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// checkTime fails unless got is in UTC and within a microsecond of want.
func checkTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if got.Location() != time.UTC {
		t.Errorf("%s: location %v, want UTC", what, got.Location())
	}
	if d := got.Sub(want); d <= -time.Microsecond || d >= time.Microsecond {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func checkTimePtr(t *testing.T, what string, got, want *time.Time) {
	t.Helper()
	switch {
	case got == nil && want == nil:
	case got == nil || want == nil:
		t.Errorf("%s: got %v, want %v", what, got, want)
	default:
		checkTime(t, what, *got, *want)
	}
}

// checkSandbox compares every field of got and want, times to the
// microsecond.
func checkSandbox(t *testing.T, got, want store.Sandbox) {
	t.Helper()
	if got.ID != want.ID || got.TenantID != want.TenantID || got.Name != want.Name ||
		got.TemplateID != want.TemplateID || got.State != want.State ||
		got.StopReason != want.StopReason || got.Version != want.Version {
		t.Errorf("sandbox %s:\n got  id=%q tenant=%q name=%q template=%q state=%q stop=%q version=%d\n want id=%q tenant=%q name=%q template=%q state=%q stop=%q version=%d",
			want.ID, got.ID, got.TenantID, got.Name, got.TemplateID, got.State, got.StopReason, got.Version,
			want.ID, want.TenantID, want.Name, want.TemplateID, want.State, want.StopReason, want.Version)
	}
	if !bytes.Equal(got.Spec, want.Spec) {
		t.Errorf("sandbox %s: spec %q, want %q", want.ID, got.Spec, want.Spec)
	}
	checkTime(t, "created_at", got.CreatedAt, want.CreatedAt)
	checkTime(t, "updated_at", got.UpdatedAt, want.UpdatedAt)
	checkTimePtr(t, "started_at", got.StartedAt, want.StartedAt)
	checkTimePtr(t, "stopped_at", got.StoppedAt, want.StoppedAt)
	checkTimePtr(t, "deleted_at", got.DeletedAt, want.DeletedAt)
	checkTimePtr(t, "purge_at", got.PurgeAt, want.PurgeAt)
}

func createTenant(t *testing.T, s store.Store, id string) {
	t.Helper()
	noErr(t, s.CreateTenant(t.Context(), store.Tenant{ID: id, Name: id + "-name", CreatedAt: at(0)}), "create tenant "+id)
}

func newSandbox(id, tenant, name string, created time.Time) store.Sandbox {
	return store.Sandbox{
		ID:         id,
		TenantID:   tenant,
		Name:       name,
		TemplateID: "host",
		State:      store.StateCreating,
		Spec:       []byte(`{"cpu":1}`),
		CreatedAt:  created,
		UpdatedAt:  created,
	}
}

func createSandbox(t *testing.T, s store.Store, sb store.Sandbox) store.Sandbox {
	t.Helper()
	got, err := s.CreateSandbox(t.Context(), sb)
	noErr(t, err, "create sandbox "+sb.ID)
	return got
}

func getSandbox(t *testing.T, s store.Store, tenant, idOrName string) store.Sandbox {
	t.Helper()
	got, err := s.GetSandbox(t.Context(), tenant, idOrName)
	noErr(t, err, "get sandbox "+idOrName)
	return got
}

func listSandboxIDs(t *testing.T, s store.Store, f store.SandboxFilter) []string {
	t.Helper()
	l, err := s.ListSandboxes(t.Context(), f)
	noErr(t, err, fmt.Sprintf("list sandboxes %+v", f))
	ids := []string{}
	for _, sb := range l {
		ids = append(ids, sb.ID)
	}
	return ids
}

func wantIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %q, want %q", what, got, want)
	}
}

// Tenants.

func testDefaultTenantExists(t *testing.T, s store.Store) {
	got, err := s.GetTenant(t.Context(), store.DefaultTenant)
	noErr(t, err, "get default tenant")
	if got.ID != store.DefaultTenant || got.CreatedAt.IsZero() {
		t.Errorf("default tenant = %+v", got)
	}
	wantErr(t, s.CreateTenant(t.Context(), store.Tenant{ID: store.DefaultTenant}), errs.ErrConflict, "create default tenant again")
}

func testCreateTenantThenGet(t *testing.T, s store.Store) {
	in := store.Tenant{ID: "acme", Name: "Acme Corp", CreatedAt: at(1)}
	noErr(t, s.CreateTenant(t.Context(), in), "create tenant")
	got, err := s.GetTenant(t.Context(), "acme")
	noErr(t, err, "get tenant")
	if got.ID != in.ID || got.Name != in.Name {
		t.Errorf("got %+v, want %+v", got, in)
	}
	checkTime(t, "created_at", got.CreatedAt, in.CreatedAt)
}

func testCreateTenantRejectsDuplicate(t *testing.T, s store.Store) {
	noErr(t, s.CreateTenant(t.Context(), store.Tenant{ID: "acme", Name: "first", CreatedAt: at(1)}), "create tenant")
	err := s.CreateTenant(t.Context(), store.Tenant{ID: "acme", Name: "second", CreatedAt: at(2)})
	wantErr(t, err, errs.ErrConflict, "create duplicate tenant")
	got, err := s.GetTenant(t.Context(), "acme")
	noErr(t, err, "get tenant")
	if got.Name != "first" {
		t.Errorf("name = %q after rejected duplicate, want %q", got.Name, "first")
	}
	checkTime(t, "created_at", got.CreatedAt, at(1))
}

func testGetTenantNotFound(t *testing.T, s store.Store) {
	_, err := s.GetTenant(t.Context(), "nope")
	wantErr(t, err, errs.ErrNotFound, "get absent tenant")
}

func testListTenantsOrdered(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, tn := range []store.Tenant{
		{ID: "t-c", CreatedAt: at(-100)},
		{ID: "t-b", CreatedAt: at(5)},
		{ID: "t-a", CreatedAt: at(5)},
		{ID: "t-0", CreatedAt: at(9)},
	} {
		noErr(t, s.CreateTenant(ctx, tn), "create tenant "+tn.ID)
	}
	l, err := s.ListTenants(ctx)
	noErr(t, err, "list tenants")
	var ids []string
	for _, tn := range l {
		if tn.ID != store.DefaultTenant {
			ids = append(ids, tn.ID)
		}
	}
	wantIDs(t, "tenants", ids, []string{"t-c", "t-a", "t-b", "t-0"})
	if len(l) != 5 {
		t.Errorf("listed %d tenants, want 5 (4 and the default)", len(l))
	}
}

func testCreateRejectsEmptyIdentifiers(t *testing.T, s store.Store) {
	ctx := t.Context()
	wantErr(t, s.CreateTenant(ctx, store.Tenant{Name: "x"}), errs.ErrInvalid, "tenant without id")
	wantErr(t, s.CreateAPIKey(ctx, store.APIKey{TenantID: store.DefaultTenant, Hash: []byte("h")}), errs.ErrInvalid, "api key without id")
	wantErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k", TenantID: store.DefaultTenant}), errs.ErrInvalid, "api key without hash")
	wantErr(t, s.CreateTemplate(ctx, store.Template{TenantID: store.DefaultTenant, Kind: "host"}), errs.ErrInvalid, "template without id")
	_, err := s.CreateSandbox(ctx, newSandbox("", store.DefaultTenant, "n", at(0)))
	wantErr(t, err, errs.ErrInvalid, "sandbox without id")
	_, err = s.CreateSandbox(ctx, newSandbox("sb", store.DefaultTenant, "", at(0)))
	wantErr(t, err, errs.ErrInvalid, "sandbox without name")
	_, err = s.CreateSandbox(ctx, newSandbox("sb", "", "n", at(0)))
	wantErr(t, err, errs.ErrInvalid, "sandbox without tenant")
	if ids := listSandboxIDs(t, s, store.SandboxFilter{IncludeDeleted: true}); len(ids) != 0 {
		t.Errorf("invalid creates stored sandboxes %q", ids)
	}
}

func testCreateRejectsUnknownTenant(t *testing.T, s store.Store) {
	ctx := t.Context()
	err := s.CreateAPIKey(ctx, store.APIKey{ID: "k1", TenantID: "ghost", Hash: []byte("h1")})
	wantErr(t, err, errs.ErrNotFound, "api key of unknown tenant")
	err = s.CreateTemplate(ctx, store.Template{ID: "alpine", TenantID: "ghost", Kind: "oci"})
	wantErr(t, err, errs.ErrNotFound, "template of unknown tenant")
	_, err = s.CreateSandbox(ctx, newSandbox("sb1", "ghost", "web", at(0)))
	wantErr(t, err, errs.ErrNotFound, "sandbox of unknown tenant")

	_, err = s.LookupAPIKey(ctx, []byte("h1"))
	wantErr(t, err, errs.ErrNotFound, "lookup rejected key")
	_, err = s.GetTemplate(ctx, "ghost", "alpine")
	wantErr(t, err, errs.ErrNotFound, "get rejected template")
	_, err = s.GetSandbox(ctx, "", "sb1")
	wantErr(t, err, errs.ErrNotFound, "get rejected sandbox")
}

func testCreateSetsZeroCreatedAt(t *testing.T, s store.Store) {
	ctx := t.Context()
	before := time.Now().Add(-time.Second)
	noErr(t, s.CreateTenant(ctx, store.Tenant{ID: "acme"}), "create tenant")
	noErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k", TenantID: "acme", Hash: []byte("h")}), "create api key")
	noErr(t, s.CreateTemplate(ctx, store.Template{ID: "host", TenantID: "acme", Kind: "host"}), "create template")
	sb, err := s.CreateSandbox(ctx, store.Sandbox{ID: "sb", TenantID: "acme", Name: "web", State: store.StateCreating})
	noErr(t, err, "create sandbox")
	after := time.Now().Add(time.Second)

	tn, err := s.GetTenant(ctx, "acme")
	noErr(t, err, "get tenant")
	k, err := s.LookupAPIKey(ctx, []byte("h"))
	noErr(t, err, "lookup api key")
	tp, err := s.GetTemplate(ctx, "acme", "host")
	noErr(t, err, "get template")
	got := getSandbox(t, s, "acme", "sb")
	for what, ts := range map[string]time.Time{
		"tenant": tn.CreatedAt, "api key": k.CreatedAt, "template": tp.CreatedAt,
		"sandbox (returned)": sb.CreatedAt, "sandbox": got.CreatedAt,
		"sandbox updated_at": got.UpdatedAt,
	} {
		if ts.Before(before) || ts.After(after) || ts.Location() != time.UTC {
			t.Errorf("%s created_at = %v, want now in UTC", what, ts)
		}
	}
	checkSandbox(t, got, sb)
}

// API keys.

func testCreateAPIKeyThenLookup(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	in := store.APIKey{ID: "key1", TenantID: "acme", Name: "ci", Hash: []byte{0, 1, 2, 0xff}, Role: store.RoleAdmin, CreatedAt: at(3)}
	noErr(t, s.CreateAPIKey(ctx, in), "create api key")
	noErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "key2", TenantID: "acme", Name: "dev", Hash: []byte{0, 1, 2, 0xfe}, CreatedAt: at(4)}), "create api key 2")
	got, err := s.LookupAPIKey(ctx, []byte{0, 1, 2, 0xff})
	noErr(t, err, "lookup api key")
	if got.ID != in.ID || got.TenantID != in.TenantID || got.Name != in.Name || !bytes.Equal(got.Hash, in.Hash) || got.Role != in.Role {
		t.Errorf("got %+v, want %+v", got, in)
	}
	checkTime(t, "created_at", got.CreatedAt, in.CreatedAt)
	got, err = s.LookupAPIKey(ctx, []byte{0, 1, 2, 0xfe})
	noErr(t, err, "lookup api key 2")
	if got.ID != "key2" || got.Role != store.RoleTenantAdmin {
		t.Errorf("lookup by second hash got %+v", got)
	}
}

func testLookupAPIKeyNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	noErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k", TenantID: store.DefaultTenant, Hash: []byte("secret-hash")}), "create api key")
	for _, h := range [][]byte{[]byte("other"), []byte("secret-has"), nil} {
		_, err := s.LookupAPIKey(ctx, h)
		wantErr(t, err, errs.ErrNotFound, fmt.Sprintf("lookup %q", h))
	}
}

func testCreateAPIKeyRejectsDuplicateID(t *testing.T, s store.Store) {
	ctx := t.Context()
	noErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k", TenantID: store.DefaultTenant, Name: "first", Hash: []byte("h1")}), "create api key")
	createTenant(t, s, "acme")
	err := s.CreateAPIKey(ctx, store.APIKey{ID: "k", TenantID: "acme", Name: "second", Hash: []byte("h2")})
	wantErr(t, err, errs.ErrConflict, "create api key with taken id")
	_, err = s.LookupAPIKey(ctx, []byte("h2"))
	wantErr(t, err, errs.ErrNotFound, "lookup rejected key")
	got, err := s.LookupAPIKey(ctx, []byte("h1"))
	noErr(t, err, "lookup first key")
	if got.Name != "first" || got.TenantID != store.DefaultTenant {
		t.Errorf("first key changed: %+v", got)
	}
	l, err := s.ListAPIKeys(ctx, "acme")
	noErr(t, err, "list api keys")
	if len(l) != 0 {
		t.Errorf("rejected key listed: %+v", l)
	}
}

func testCreateAPIKeyRejectsDuplicateHash(t *testing.T, s store.Store) {
	ctx := t.Context()
	noErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k1", TenantID: store.DefaultTenant, Hash: []byte("h")}), "create api key")
	err := s.CreateAPIKey(ctx, store.APIKey{ID: "k2", TenantID: store.DefaultTenant, Hash: []byte("h")})
	wantErr(t, err, errs.ErrConflict, "create api key with taken hash")
	got, err := s.LookupAPIKey(ctx, []byte("h"))
	noErr(t, err, "lookup")
	if got.ID != "k1" {
		t.Errorf("lookup got %s, want k1", got.ID)
	}
	l, err := s.ListAPIKeys(ctx, store.DefaultTenant)
	noErr(t, err, "list api keys")
	if len(l) != 1 {
		t.Errorf("listed %d keys, want 1", len(l))
	}
}

func testListAPIKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	for _, k := range []store.APIKey{
		{ID: "k-b", TenantID: "acme", Hash: []byte("1"), CreatedAt: at(2)},
		{ID: "k-other", TenantID: store.DefaultTenant, Hash: []byte("2"), CreatedAt: at(0)},
		{ID: "k-c", TenantID: "acme", Hash: []byte("3"), CreatedAt: at(1)},
		{ID: "k-a", TenantID: "acme", Hash: []byte("4"), CreatedAt: at(2)},
	} {
		noErr(t, s.CreateAPIKey(ctx, k), "create api key "+k.ID)
	}
	l, err := s.ListAPIKeys(ctx, "acme")
	noErr(t, err, "list api keys")
	var ids []string
	for _, k := range l {
		ids = append(ids, k.ID)
		if k.TenantID != "acme" {
			t.Errorf("key %s of tenant %s listed for acme", k.ID, k.TenantID)
		}
	}
	wantIDs(t, "acme keys", ids, []string{"k-c", "k-a", "k-b"})
	l, err = s.ListAPIKeys(ctx, store.DefaultTenant)
	noErr(t, err, "list default keys")
	if len(l) != 1 || l[0].ID != "k-other" {
		t.Errorf("default keys = %+v", l)
	}
}

func testDeleteAPIKey(t *testing.T, s store.Store) {
	ctx := t.Context()
	noErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k", TenantID: store.DefaultTenant, Hash: []byte("h")}), "create api key")
	noErr(t, s.DeleteAPIKey(ctx, store.DefaultTenant, "k"), "delete api key")
	_, err := s.LookupAPIKey(ctx, []byte("h"))
	wantErr(t, err, errs.ErrNotFound, "lookup deleted key")
	wantErr(t, s.DeleteAPIKey(ctx, store.DefaultTenant, "k"), errs.ErrNotFound, "delete twice")
	wantErr(t, s.DeleteAPIKey(ctx, store.DefaultTenant, "never"), errs.ErrNotFound, "delete absent")
}

func testDeleteAPIKeyOtherTenant(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	noErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k", TenantID: "acme", Hash: []byte("h")}), "create api key")
	wantErr(t, s.DeleteAPIKey(ctx, store.DefaultTenant, "k"), errs.ErrNotFound, "delete other tenant's key")
	got, err := s.LookupAPIKey(ctx, []byte("h"))
	noErr(t, err, "key survives")
	if got.ID != "k" {
		t.Errorf("lookup got %s", got.ID)
	}
	l, err := s.ListAPIKeys(ctx, store.DefaultTenant)
	noErr(t, err, "list default keys")
	if len(l) != 0 {
		t.Errorf("other tenant's key listed: %+v", l)
	}
}

// Templates.

func testCreateTemplateThenGet(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := store.Template{
		ID: "alpine-3.20", TenantID: store.DefaultTenant, Kind: "oci", Source: "docker.io/library/alpine:3.20",
		Digest: "sha256:abc", Config: []byte(`{"Env": ["A=1"],  "WorkingDir":"/"}`), SizeBytes: 1 << 40, CreatedAt: at(7),
	}
	noErr(t, s.CreateTemplate(ctx, in), "create template")
	got, err := s.GetTemplate(ctx, store.DefaultTenant, "alpine-3.20")
	noErr(t, err, "get template")
	if got.ID != in.ID || got.TenantID != in.TenantID || got.Kind != in.Kind || got.Source != in.Source ||
		got.Digest != in.Digest || got.SizeBytes != in.SizeBytes || !bytes.Equal(got.Config, in.Config) {
		t.Errorf("got %+v, want %+v", got, in)
	}
	checkTime(t, "created_at", got.CreatedAt, in.CreatedAt)
}

func testCreateTemplateRejectsDuplicate(t *testing.T, s store.Store) {
	ctx := t.Context()
	noErr(t, s.CreateTemplate(ctx, store.Template{ID: "host", TenantID: store.DefaultTenant, Kind: "host", Source: "/"}), "create template")
	err := s.CreateTemplate(ctx, store.Template{ID: "host", TenantID: store.DefaultTenant, Kind: "oci", Source: "x"})
	wantErr(t, err, errs.ErrConflict, "create duplicate template")
	got, err := s.GetTemplate(ctx, store.DefaultTenant, "host")
	noErr(t, err, "get template")
	if got.Kind != "host" || got.Source != "/" {
		t.Errorf("template changed by rejected create: %+v", got)
	}
}

func testTemplateIDsPerTenant(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	noErr(t, s.CreateTemplate(ctx, store.Template{ID: "alpine", TenantID: store.DefaultTenant, Kind: "oci", Source: "a"}), "create template default")
	noErr(t, s.CreateTemplate(ctx, store.Template{ID: "alpine", TenantID: "acme", Kind: "oci", Source: "b"}), "create template acme")
	a, err := s.GetTemplate(ctx, store.DefaultTenant, "alpine")
	noErr(t, err, "get default's")
	b, err := s.GetTemplate(ctx, "acme", "alpine")
	noErr(t, err, "get acme's")
	if a.Source != "a" || b.Source != "b" || a.TenantID != store.DefaultTenant || b.TenantID != "acme" {
		t.Errorf("templates mixed up: %+v %+v", a, b)
	}
}

func testGetTemplateNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	noErr(t, s.CreateTemplate(ctx, store.Template{ID: "mine", TenantID: "acme", Kind: "host"}), "create template")
	_, err := s.GetTemplate(ctx, store.DefaultTenant, "mine")
	wantErr(t, err, errs.ErrNotFound, "get other tenant's template")
	_, err = s.GetTemplate(ctx, "acme", "absent")
	wantErr(t, err, errs.ErrNotFound, "get absent template")
}

func testListTemplates(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	for _, tp := range []store.Template{
		{ID: "z", TenantID: "acme", Kind: "oci", CreatedAt: at(1)},
		{ID: "b", TenantID: "acme", Kind: "oci", CreatedAt: at(3)},
		{ID: "x", TenantID: store.DefaultTenant, Kind: "oci", CreatedAt: at(2)},
		{ID: "a", TenantID: "acme", Kind: "oci", CreatedAt: at(3)},
	} {
		noErr(t, s.CreateTemplate(ctx, tp), "create template "+tp.ID)
	}
	l, err := s.ListTemplates(ctx, "acme")
	noErr(t, err, "list templates")
	var ids []string
	for _, tp := range l {
		ids = append(ids, tp.ID)
	}
	wantIDs(t, "acme templates", ids, []string{"z", "a", "b"})
	l, err = s.ListTemplates(ctx, store.DefaultTenant)
	noErr(t, err, "list default templates")
	if len(l) != 1 || l[0].ID != "x" {
		t.Errorf("default templates = %+v", l)
	}
}

func testDeleteTemplate(t *testing.T, s store.Store) {
	ctx := t.Context()
	noErr(t, s.CreateTemplate(ctx, store.Template{ID: "host", TenantID: store.DefaultTenant, Kind: "host"}), "create template")
	noErr(t, s.DeleteTemplate(ctx, store.DefaultTenant, "host"), "delete template")
	_, err := s.GetTemplate(ctx, store.DefaultTenant, "host")
	wantErr(t, err, errs.ErrNotFound, "get deleted template")
	wantErr(t, s.DeleteTemplate(ctx, store.DefaultTenant, "host"), errs.ErrNotFound, "delete twice")
	noErr(t, s.CreateTemplate(ctx, store.Template{ID: "host", TenantID: store.DefaultTenant, Kind: "host"}), "re-create deleted template")
}

func testDeleteTemplateOtherTenant(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	noErr(t, s.CreateTemplate(ctx, store.Template{ID: "mine", TenantID: "acme", Kind: "host"}), "create template")
	wantErr(t, s.DeleteTemplate(ctx, store.DefaultTenant, "mine"), errs.ErrNotFound, "delete other tenant's template")
	_, err := s.GetTemplate(ctx, "acme", "mine")
	noErr(t, err, "template survives")
}

// Sandboxes.

func testCreateSandboxVersionOne(t *testing.T, s store.Store) {
	in := newSandbox("sb1", store.DefaultTenant, "web", at(0))
	in.Version = 42
	got := createSandbox(t, s, in)
	want := in
	want.Version = 1
	checkSandbox(t, got, want)
	checkSandbox(t, getSandbox(t, s, store.DefaultTenant, "sb1"), want)
}

func testCreateSandboxRejectsDuplicateID(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	createTenant(t, s, "acme")
	_, err := s.CreateSandbox(ctx, newSandbox("sb1", "acme", "db", at(1)))
	wantErr(t, err, errs.ErrConflict, "create sandbox with id taken in another tenant")
	_, err = s.CreateSandbox(ctx, newSandbox("sb1", store.DefaultTenant, "db", at(1)))
	wantErr(t, err, errs.ErrConflict, "create sandbox with taken id")
	_, err = s.GetSandbox(ctx, store.DefaultTenant, "db")
	wantErr(t, err, errs.ErrNotFound, "get rejected sandbox by name")
	_, err = s.GetSandbox(ctx, "acme", "db")
	wantErr(t, err, errs.ErrNotFound, "get rejected sandbox by name in acme")
	checkSandbox(t, getSandbox(t, s, "", "sb1"), first)
	wantIDs(t, "all sandboxes", listSandboxIDs(t, s, store.SandboxFilter{IncludeDeleted: true}), []string{"sb1"})
}

func testCreateSandboxRejectsDuplicateName(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	_, err := s.CreateSandbox(ctx, newSandbox("sb2", store.DefaultTenant, "web", at(1)))
	wantErr(t, err, errs.ErrConflict, "create sandbox with taken name")
	_, err = s.GetSandbox(ctx, "", "sb2")
	wantErr(t, err, errs.ErrNotFound, "get rejected sandbox")
	checkSandbox(t, getSandbox(t, s, store.DefaultTenant, "web"), first)
	wantIDs(t, "all sandboxes", listSandboxIDs(t, s, store.SandboxFilter{IncludeDeleted: true}), []string{"sb1"})
}

func testCreateSandboxSameNameOtherTenant(t *testing.T, s store.Store) {
	createTenant(t, s, "acme")
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	createSandbox(t, s, newSandbox("sb2", "acme", "web", at(1)))
	if got := getSandbox(t, s, store.DefaultTenant, "web"); got.ID != "sb1" {
		t.Errorf("default's web = %s, want sb1", got.ID)
	}
	if got := getSandbox(t, s, "acme", "web"); got.ID != "sb2" {
		t.Errorf("acme's web = %s, want sb2", got.ID)
	}
}

func testGetSandboxByIDAndName(t *testing.T, s store.Store) {
	want := createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	checkSandbox(t, getSandbox(t, s, store.DefaultTenant, "sb1"), want)
	checkSandbox(t, getSandbox(t, s, store.DefaultTenant, "web"), want)
}

func testGetSandboxPrefersID(t *testing.T, s store.Store) {
	// sb2 is named like sb1's id: the id wins; sb2 stays reachable by id.
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	createSandbox(t, s, newSandbox("sb2", store.DefaultTenant, "sb1", at(1)))
	if got := getSandbox(t, s, store.DefaultTenant, "sb1"); got.ID != "sb1" {
		t.Errorf("get sb1 found %s, want the id match sb1", got.ID)
	}
	if got := getSandbox(t, s, store.DefaultTenant, "sb2"); got.ID != "sb2" {
		t.Errorf("get sb2 found %s", got.ID)
	}
}

func testGetSandboxEmptyTenant(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	want := createSandbox(t, s, newSandbox("sb1", "acme", "web", at(0)))
	checkSandbox(t, getSandbox(t, s, "", "sb1"), want)
	_, err := s.GetSandbox(ctx, "", "web")
	wantErr(t, err, errs.ErrNotFound, "get by name with empty tenant")
}

func testGetSandboxNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	createSandbox(t, s, newSandbox("sb1", "acme", "web", at(0)))
	for _, q := range []string{"sb1", "web", "absent", ""} {
		_, err := s.GetSandbox(ctx, store.DefaultTenant, q)
		wantErr(t, err, errs.ErrNotFound, "get "+q+" as default tenant")
	}
	_, err := s.GetSandbox(ctx, "", "absent")
	wantErr(t, err, errs.ErrNotFound, "get absent with empty tenant")
	_, err = s.GetSandbox(ctx, "ghost", "sb1")
	wantErr(t, err, errs.ErrNotFound, "get as unknown tenant")
}

func testSandboxTimesRoundTrip(t *testing.T, s store.Store) {
	in := newSandbox("sb1", store.DefaultTenant, "web", at(0))
	in.UpdatedAt = at(1)
	in.StartedAt = ptr(at(2))
	in.StoppedAt = ptr(time.Date(2027, 1, 2, 3, 4, 5, 999999999, time.FixedZone("PST", -8*3600)))
	in.DeletedAt = ptr(at(4).UTC())
	in.PurgeAt = ptr(time.Date(2099, 12, 31, 23, 59, 59, 1000, time.UTC))
	in.State = store.StateDeleted
	want := in
	want.Version = 1
	checkSandbox(t, createSandbox(t, s, in), want)
	got := getSandbox(t, s, store.DefaultTenant, "sb1")
	checkSandbox(t, got, want)
	if got.StoppedAt.Year() != 2027 || got.StoppedAt.Day() != 2 || got.StoppedAt.Hour() != 11 {
		t.Errorf("stopped_at %v not converted to UTC wall time", got.StoppedAt)
	}
}

func testSandboxOptionalTimes(t *testing.T, s store.Store) {
	ctx := t.Context()
	sb := createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	got := getSandbox(t, s, store.DefaultTenant, "sb1")
	if got.StartedAt != nil || got.StoppedAt != nil || got.DeletedAt != nil || got.PurgeAt != nil {
		t.Fatalf("unset times came back set: %+v", got)
	}
	sb.State = store.StateRunning
	sb.StartedAt = ptr(at(10))
	sb.PurgeAt = ptr(at(20))
	sb, err := s.UpdateSandbox(ctx, sb)
	noErr(t, err, "update setting times")
	got = getSandbox(t, s, store.DefaultTenant, "sb1")
	checkTimePtr(t, "started_at", got.StartedAt, ptr(at(10)))
	checkTimePtr(t, "purge_at", got.PurgeAt, ptr(at(20)))
	if got.StoppedAt != nil || got.DeletedAt != nil {
		t.Errorf("unset times came back set: %+v", got)
	}
	sb.StartedAt = nil
	sb.PurgeAt = nil
	_, err = s.UpdateSandbox(ctx, sb)
	noErr(t, err, "update clearing times")
	got = getSandbox(t, s, store.DefaultTenant, "sb1")
	if got.StartedAt != nil || got.PurgeAt != nil {
		t.Errorf("cleared times came back set: started %v purge %v", got.StartedAt, got.PurgeAt)
	}
}

func testSpecAndConfigBytes(t *testing.T, s store.Store) {
	ctx := t.Context()
	// Not normalised JSON: key order, spacing, escapes and a duplicate key
	// must all survive, so the store must not parse or re-encode it.
	spec := []byte("{\"z\":1,  \"a\" : [ \"\\u00e9\", \"é\" ],\n\t\"z\":2}")
	in := newSandbox("sb1", store.DefaultTenant, "web", at(0))
	in.Spec = spec
	createSandbox(t, s, in)
	if got := getSandbox(t, s, store.DefaultTenant, "sb1"); !bytes.Equal(got.Spec, spec) {
		t.Errorf("spec = %q, want %q", got.Spec, spec)
	}
	noSpec := newSandbox("sb2", store.DefaultTenant, "db", at(1))
	noSpec.Spec = nil
	createSandbox(t, s, noSpec)
	if got := getSandbox(t, s, store.DefaultTenant, "sb2"); len(got.Spec) != 0 {
		t.Errorf("nil spec came back as %q", got.Spec)
	}
	noErr(t, s.CreateTemplate(ctx, store.Template{ID: "t", TenantID: store.DefaultTenant, Kind: "oci", Config: spec}), "create template")
	tp, err := s.GetTemplate(ctx, store.DefaultTenant, "t")
	noErr(t, err, "get template")
	if !bytes.Equal(tp.Config, spec) {
		t.Errorf("config = %q, want %q", tp.Config, spec)
	}
}

func testUpdateSandbox(t *testing.T, s store.Store) {
	ctx := t.Context()
	v1 := createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	before := time.Now().Add(-time.Second)

	up := v1
	up.Name = "web2"
	up.TemplateID = "alpine"
	up.State = store.StateStopped
	up.Spec = []byte(`{"cpu":2}`)
	up.StopReason = "idle"
	up.StoppedAt = ptr(at(5))
	up.UpdatedAt = at(-1000) // ignored: the store sets UpdatedAt
	v2, err := s.UpdateSandbox(ctx, up)
	noErr(t, err, "update sandbox")
	after := time.Now().Add(time.Second)

	if v2.Version != 2 {
		t.Errorf("version = %d, want 2", v2.Version)
	}
	if v2.UpdatedAt.Before(before) || v2.UpdatedAt.After(after) || v2.UpdatedAt.Location() != time.UTC {
		t.Errorf("updated_at = %v, want now in UTC", v2.UpdatedAt)
	}
	want := up
	want.Version = 2
	want.UpdatedAt = v2.UpdatedAt
	checkSandbox(t, v2, want)
	checkSandbox(t, getSandbox(t, s, store.DefaultTenant, "sb1"), want)
	checkSandbox(t, getSandbox(t, s, store.DefaultTenant, "web2"), want)
	_, err = s.GetSandbox(ctx, store.DefaultTenant, "web")
	wantErr(t, err, errs.ErrNotFound, "old name after rename")

	v3, err := s.UpdateSandbox(ctx, v2)
	noErr(t, err, "update again")
	if v3.Version != 3 || v3.UpdatedAt.Before(v2.UpdatedAt) {
		t.Errorf("second update: version %d updated_at %v, want 3 and not before %v", v3.Version, v3.UpdatedAt, v2.UpdatedAt)
	}
	checkTime(t, "created_at", v3.CreatedAt, v1.CreatedAt)
}

func testUpdateSandboxStale(t *testing.T, s store.Store) {
	ctx := t.Context()
	v1 := createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	a := v1
	a.State = store.StateRunning
	v2, err := s.UpdateSandbox(ctx, a)
	noErr(t, err, "first writer")

	for _, version := range []int64{v1.Version, 0, v2.Version + 1, -1} {
		b := v1
		b.Version = version
		b.State = store.StateError
		b.Name = "other"
		b.Spec = []byte(`{"lost":true}`)
		_, err := s.UpdateSandbox(ctx, b)
		wantErr(t, err, errs.ErrConflict, fmt.Sprintf("update with version %d", version))
	}
	checkSandbox(t, getSandbox(t, s, store.DefaultTenant, "sb1"), v2)
}

func testUpdateSandboxNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	mine := createSandbox(t, s, newSandbox("sb1", "acme", "web", at(0)))

	stolen := mine
	stolen.TenantID = store.DefaultTenant
	stolen.State = store.StateError
	_, err := s.UpdateSandbox(ctx, stolen)
	wantErr(t, err, errs.ErrNotFound, "update other tenant's sandbox")

	absent := newSandbox("nope", store.DefaultTenant, "x", at(0))
	absent.Version = 1
	_, err = s.UpdateSandbox(ctx, absent)
	wantErr(t, err, errs.ErrNotFound, "update absent sandbox")
	_, err = s.GetSandbox(ctx, "", "nope")
	wantErr(t, err, errs.ErrNotFound, "update must not create")

	checkSandbox(t, getSandbox(t, s, "acme", "sb1"), mine)
}

func testUpdateSandboxTakenName(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	b := createSandbox(t, s, newSandbox("sb2", store.DefaultTenant, "db", at(1)))
	up := b
	up.Name = "web"
	up.State = store.StateRunning
	_, err := s.UpdateSandbox(ctx, up)
	wantErr(t, err, errs.ErrConflict, "rename to taken name")
	checkSandbox(t, getSandbox(t, s, store.DefaultTenant, "sb2"), b)
	if got := getSandbox(t, s, store.DefaultTenant, "web"); got.ID != "sb1" {
		t.Errorf("web now resolves to %s", got.ID)
	}
}

func testListSandboxesOrdered(t *testing.T, s store.Store) {
	for _, sb := range []store.Sandbox{
		newSandbox("sb-b", store.DefaultTenant, "n1", at(10)),
		newSandbox("sb-z", store.DefaultTenant, "n2", at(-10)),
		newSandbox("sb-a", store.DefaultTenant, "n3", at(10)),
		newSandbox("sb-0", store.DefaultTenant, "n4", at(20)),
		// Same second, a millisecond apart: ordered by time, not by id.
		newSandbox("sb-y", store.DefaultTenant, "n5", at(0)),
		newSandbox("sb-x", store.DefaultTenant, "n6", at(0).Add(time.Millisecond)),
	} {
		createSandbox(t, s, sb)
	}
	wantIDs(t, "list", listSandboxIDs(t, s, store.SandboxFilter{}),
		[]string{"sb-z", "sb-y", "sb-x", "sb-a", "sb-b", "sb-0"})
	// Updates do not reorder: the order is by CreatedAt, not UpdatedAt.
	sb := getSandbox(t, s, store.DefaultTenant, "sb-z")
	sb.State = store.StateRunning
	_, err := s.UpdateSandbox(t.Context(), sb)
	noErr(t, err, "update")
	wantIDs(t, "list after update", listSandboxIDs(t, s, store.SandboxFilter{}),
		[]string{"sb-z", "sb-y", "sb-x", "sb-a", "sb-b", "sb-0"})
}

// createStates creates one sandbox per state, named after it, in order.
func createStates(t *testing.T, s store.Store, tenant, prefix string, states ...store.SandboxState) {
	t.Helper()
	for i, st := range states {
		sb := newSandbox(prefix+string(st), tenant, prefix+string(st), at(i))
		sb.State = st
		createSandbox(t, s, sb)
	}
}

func testListSandboxesDeleted(t *testing.T, s store.Store) {
	createStates(t, s, store.DefaultTenant, "",
		store.StateRunning, store.StateDeleted, store.StateStopped)
	wantIDs(t, "default filter", listSandboxIDs(t, s, store.SandboxFilter{}),
		[]string{"running", "stopped"})
	wantIDs(t, "IncludeDeleted", listSandboxIDs(t, s, store.SandboxFilter{IncludeDeleted: true}),
		[]string{"running", "deleted", "stopped"})
	wantIDs(t, "States deleted", listSandboxIDs(t, s, store.SandboxFilter{States: []store.SandboxState{store.StateDeleted}}),
		[]string{"deleted"})
	wantIDs(t, "States running with IncludeDeleted",
		listSandboxIDs(t, s, store.SandboxFilter{States: []store.SandboxState{store.StateRunning}, IncludeDeleted: true}),
		[]string{"running"})
}

func testListSandboxesStates(t *testing.T, s store.Store) {
	createStates(t, s, store.DefaultTenant, "",
		store.StateCreating, store.StateRunning, store.StatePaused, store.StateStopped, store.StateDeleted, store.StateError)
	for _, tc := range []struct {
		states []store.SandboxState
		want   []string
	}{
		{[]store.SandboxState{store.StateRunning}, []string{"running"}},
		{[]store.SandboxState{store.StateStopped, store.StateRunning}, []string{"running", "stopped"}},
		{[]store.SandboxState{store.StatePaused, store.StateError, store.StateCreating}, []string{"creating", "paused", "error"}},
		{[]store.SandboxState{"no-such-state"}, []string{}},
		{nil, []string{"creating", "running", "paused", "stopped", "error"}},
	} {
		wantIDs(t, fmt.Sprintf("states %v", tc.states),
			listSandboxIDs(t, s, store.SandboxFilter{States: tc.states}), tc.want)
	}
}

func testListSandboxesTenants(t *testing.T, s store.Store) {
	createTenant(t, s, "acme")
	createTenant(t, s, "bolt")
	createSandbox(t, s, newSandbox("a1", "acme", "web", at(1)))
	createSandbox(t, s, newSandbox("d1", store.DefaultTenant, "web", at(2)))
	createSandbox(t, s, newSandbox("a2", "acme", "db", at(3)))
	del := newSandbox("a3", "acme", "old", at(4))
	del.State = store.StateDeleted
	createSandbox(t, s, del)

	wantIDs(t, "acme", listSandboxIDs(t, s, store.SandboxFilter{TenantID: "acme"}), []string{"a1", "a2"})
	wantIDs(t, "acme with deleted", listSandboxIDs(t, s, store.SandboxFilter{TenantID: "acme", IncludeDeleted: true}), []string{"a1", "a2", "a3"})
	wantIDs(t, "default", listSandboxIDs(t, s, store.SandboxFilter{TenantID: store.DefaultTenant}), []string{"d1"})
	wantIDs(t, "bolt", listSandboxIDs(t, s, store.SandboxFilter{TenantID: "bolt"}), []string{})
	wantIDs(t, "ghost", listSandboxIDs(t, s, store.SandboxFilter{TenantID: "ghost"}), []string{})
	wantIDs(t, "every tenant", listSandboxIDs(t, s, store.SandboxFilter{}), []string{"a1", "d1", "a2"})
	wantIDs(t, "every tenant, deleted only",
		listSandboxIDs(t, s, store.SandboxFilter{States: []store.SandboxState{store.StateDeleted}}), []string{"a3"})
}

func testDeleteSandbox(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	noErr(t, s.DeleteSandbox(ctx, store.DefaultTenant, "sb1"), "delete sandbox")
	_, err := s.GetSandbox(ctx, store.DefaultTenant, "sb1")
	wantErr(t, err, errs.ErrNotFound, "get purged sandbox")
	_, err = s.GetSandbox(ctx, store.DefaultTenant, "web")
	wantErr(t, err, errs.ErrNotFound, "get purged sandbox by name")
	wantIDs(t, "list", listSandboxIDs(t, s, store.SandboxFilter{IncludeDeleted: true}), []string{})
	wantErr(t, s.DeleteSandbox(ctx, store.DefaultTenant, "sb1"), errs.ErrNotFound, "delete twice")
	wantErr(t, s.DeleteSandbox(ctx, store.DefaultTenant, "absent"), errs.ErrNotFound, "delete absent")
	// The name is free again; the new record starts over at version 1.
	got := createSandbox(t, s, newSandbox("sb2", store.DefaultTenant, "web", at(1)))
	if got.Version != 1 {
		t.Errorf("version = %d", got.Version)
	}
}

func testDeleteSandboxOtherTenant(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	mine := createSandbox(t, s, newSandbox("sb1", "acme", "web", at(0)))
	wantErr(t, s.DeleteSandbox(ctx, store.DefaultTenant, "sb1"), errs.ErrNotFound, "delete other tenant's sandbox")
	wantErr(t, s.DeleteSandbox(ctx, "", "sb1"), errs.ErrNotFound, "delete with empty tenant")
	wantErr(t, s.DeleteSandbox(ctx, "acme", "web"), errs.ErrNotFound, "delete by name")
	checkSandbox(t, getSandbox(t, s, "acme", "sb1"), mine)
}

func testEmptyLists(t *testing.T, s store.Store) {
	ctx := t.Context()
	keys, err := s.ListAPIKeys(ctx, store.DefaultTenant)
	noErr(t, err, "list api keys")
	tps, err := s.ListTemplates(ctx, store.DefaultTenant)
	noErr(t, err, "list templates")
	sbs, err := s.ListSandboxes(ctx, store.SandboxFilter{IncludeDeleted: true})
	noErr(t, err, "list sandboxes")
	tns, err := s.ListTenants(ctx)
	noErr(t, err, "list tenants")
	if len(keys) != 0 || len(tps) != 0 || len(sbs) != 0 || len(tns) != 1 {
		t.Errorf("new store lists %d keys, %d templates, %d sandboxes, %d tenants; want 0, 0, 0, 1",
			len(keys), len(tps), len(sbs), len(tns))
	}
}

// Concurrency.

func testConcurrentCreates(t *testing.T, s store.Store) {
	ctx := t.Context()
	const workers, each = 16, 8
	var wg sync.WaitGroup
	errc := make(chan error, workers*each*3)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("sb-%02d-%02d", w, i)
				sb := newSandbox(id, store.DefaultTenant, "name-"+id, at(w*each+i))
				if _, err := s.CreateSandbox(ctx, sb); err != nil {
					errc <- err
					continue
				}
				if _, err := s.GetSandbox(ctx, store.DefaultTenant, "name-"+id); err != nil {
					errc <- fmt.Errorf("read own write %s: %w", id, err)
				}
				if _, err := s.ListSandboxes(ctx, store.SandboxFilter{}); err != nil {
					errc <- err
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if ids := listSandboxIDs(t, s, store.SandboxFilter{}); len(ids) != workers*each {
		t.Errorf("listed %d sandboxes, want %d", len(ids), workers*each)
	}
}

func testConcurrentSameName(t *testing.T, s store.Store) {
	ctx := t.Context()
	const workers = 16
	var wg sync.WaitGroup
	results := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			_, results[w] = s.CreateSandbox(ctx, newSandbox(fmt.Sprintf("sb-%02d", w), store.DefaultTenant, "web", at(w)))
		})
	}
	wg.Wait()
	wins := 0
	for w, err := range results {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, errs.ErrConflict):
			t.Errorf("worker %d: %v, want nil or ErrConflict", w, err)
		}
	}
	if wins != 1 {
		t.Errorf("%d creates of one name succeeded, want 1", wins)
	}
	if ids := listSandboxIDs(t, s, store.SandboxFilter{IncludeDeleted: true}); len(ids) != 1 {
		t.Errorf("stored %q, want exactly one sandbox", ids)
	}
}

func testConcurrentUpdates(t *testing.T, s store.Store) {
	ctx := t.Context()
	type counter struct{ N int }
	sb := newSandbox("sb1", store.DefaultTenant, "web", at(0))
	sb.Spec = []byte(`{"N":0}`)
	createSandbox(t, s, sb)

	const workers, each = 8, 15
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for done := 0; done < each; {
				cur, err := s.GetSandbox(ctx, store.DefaultTenant, "sb1")
				if err != nil {
					errc <- err
					return
				}
				var c counter
				if err := json.Unmarshal(cur.Spec, &c); err != nil {
					errc <- err
					return
				}
				c.N++
				cur.Spec, _ = json.Marshal(c)
				_, err = s.UpdateSandbox(ctx, cur)
				switch {
				case err == nil:
					done++
				case errors.Is(err, errs.ErrConflict):
					// Lost the race: re-read and retry.
				default:
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	got := getSandbox(t, s, store.DefaultTenant, "sb1")
	var c counter
	noErr(t, json.Unmarshal(got.Spec, &c), "decode spec")
	if c.N != workers*each || got.Version != workers*each+1 {
		t.Errorf("counter %d version %d, want %d and %d: an update was lost", c.N, got.Version, workers*each, workers*each+1)
	}
}
