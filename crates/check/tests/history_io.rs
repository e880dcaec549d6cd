//! The JSON-lines history format.

use tandem_check::{parse_jsonl, read_jsonl, to_jsonl, write_jsonl, HistOp, OpKind};

fn sample() -> Vec<HistOp> {
    vec![
        HistOp::write(1, 0, 7, 42, 100, 250),
        HistOp::read(2, 1, 7, None, 120, 180),
        HistOp::write(3, 2, 7, u64::MAX, 300, 0).pending(),
        HistOp::read(4, 2, 8, Some(42), 400, 410).failed(),
    ]
}

#[test]
fn format_is_flat_with_an_op_tag() {
    let text = to_jsonl(&sample()[..1]);
    assert_eq!(
        text,
        "{\"session\":1,\"node\":0,\"op\":\"write\",\"key\":7,\"value\":42,\"invoke_ns\":100,\"complete_ns\":250,\"ok\":true}\n"
    );
}

#[test]
fn round_trip_through_a_file() {
    let path = std::env::temp_dir().join(format!("tandem-check-{}.jsonl", std::process::id()));
    write_jsonl(&path, &sample()).unwrap();
    assert_eq!(read_jsonl(&path).unwrap(), sample());
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn missing_complete_ns_means_no_reply_and_blank_lines_are_skipped() {
    let text = "\n{\"session\":1,\"node\":0,\"op\":\"read\",\"key\":3,\"value\":null,\"invoke_ns\":5,\"ok\":true}\n\n";
    let ops = parse_jsonl(text.as_bytes()).unwrap();
    assert_eq!(ops.len(), 1);
    assert!(ops[0].is_pending());
    assert_eq!(
        ops[0].kind,
        OpKind::Read {
            key: 3,
            value: None
        }
    );
}

#[test]
fn bad_lines_are_named() {
    let good = to_jsonl(&sample()[..1]);
    let bad = format!(
        "{good}{{\"session\":1,\"node\":0,\"op\":\"cas\",\"key\":1,\"invoke_ns\":1,\"ok\":true}}\n"
    );
    let err = parse_jsonl(bad.as_bytes()).unwrap_err();
    assert!(err.starts_with("line 2: "), "{err}");
    assert!(err.contains("cas"), "{err}");
    let err = parse_jsonl(format!("{good}{good}not json\n").as_bytes()).unwrap_err();
    assert!(err.starts_with("line 3: "), "{err}");
    let err = read_jsonl("/nonexistent/history.jsonl").unwrap_err();
    assert!(err.contains("/nonexistent/history.jsonl"), "{err}");
}
