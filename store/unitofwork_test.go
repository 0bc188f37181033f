package store_test

import (
	"context"
	"testing"

	"taskflow/store"
	"taskflow/store/storetest"
)

func TestContextOutlivingUnitOfWorkHasNoTx(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	var inner context.Context
	if err := db.UnitOfWork(t.Context(), func(ctx context.Context) error {
		if store.TxFrom(ctx) == nil {
			t.Fatal("no transaction inside the unit of work")
		}
		inner = ctx
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if store.TxFrom(inner) != nil {
		t.Fatal("a context kept after the unit of work still carries its closed transaction")
	}
	// A store read with it after the end goes to the pool, not to the closed tx.
	_, err := db.RoleIn(inner, "00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000", "workspace")
	if store.ErrorCode(err) != store.CodeNotFound {
		t.Fatalf("read after the unit of work: %v", err)
	}
}
