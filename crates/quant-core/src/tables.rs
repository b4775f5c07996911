//! PLACEHOLDER: E4M3-FN, UE8M0 and E2M1 tables; being written now.
