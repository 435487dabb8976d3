package filter

import (
	"errors"
	"fmt"
	"strings"

	"github.com/antlr/antlr4/runtime/Go/antlr"
	cesql "github.com/cloudevents/sdk-go/sql/v2"
	"github.com/cloudevents/sdk-go/sql/v2/gen"
	cesqlparser "github.com/cloudevents/sdk-go/sql/v2/parser"
	"github.com/cloudevents/sdk-go/sql/v2/utils"
	"github.com/cloudevents/sdk-go/v2/event"
)

// syntaxError is the first syntax error of an expression, where it is.
type syntaxError struct {
	line, column int // column counts from 1
	msg          string
}

func (e *syntaxError) Error() string {
	if e.line > 1 {
		return fmt.Sprintf("CESQL syntax error at line %d, column %d: %s", e.line, e.column, e.msg)
	}
	return fmt.Sprintf("CESQL syntax error at column %d: %s", e.column, e.msg)
}

// oneLine escapes line breaks and tabs in error messages.
var oneLine = strings.NewReplacer("\r", `\r`, "\n", `\n`, "\t", `\t`)

// firstError keeps the first error antlr reports, with its position;
// sdk-go's own listener keeps only the message.
type firstError struct {
	antlr.DefaultErrorListener
	err *syntaxError
}

func (l *firstError) SyntaxError(_ antlr.Recognizer, _ any, line, column int, msg string, _ antlr.RecognitionException) {
	if l.err == nil {
		// antlr quotes the offending text as it is; a line break in it
		// would split the one line the runner prints.
		l.err = &syntaxError{line: line, column: column + 1, msg: oneLine.Replace(msg)}
	}
}

// compileCESQL parses a CESQL expression. The syntax is checked first
// with a listener that keeps positions (and, unlike the parser sdk-go
// builds, prints nothing on the lexer's errors); sdk-go's parser then
// builds the expression, whose semantic errors (an unknown function, an
// integer out of range) come without a position.
func compileCESQL(expr string) (parsed cesql.Expression, err error) {
	defer func() {
		// antlr's recovery can panic on input it cannot resynchronize on;
		// that is an invalid expression (exit 2), not a crash.
		if r := recover(); r != nil {
			parsed, err = nil, fmt.Errorf("CESQL expression not understood: %v", r)
		}
	}()
	if strings.TrimSpace(expr) == "" {
		return nil, fmt.Errorf("CESQL expression is empty")
	}
	listener := &firstError{}
	lexer := gen.NewCESQLParserLexer(cesqlparser.NewCaseChangingStream(antlr.NewInputStream(expr), true))
	lexer.RemoveErrorListeners()
	lexer.AddErrorListener(listener)
	p := gen.NewCESQLParserParser(antlr.NewCommonTokenStream(lexer, antlr.TokenDefaultChannel))
	p.RemoveErrorListeners()
	p.AddErrorListener(listener)
	p.Cesql()
	if listener.err != nil {
		return nil, listener.err
	}
	return parse(expr)
}

// parse runs sdk-go's parser on an expression whose syntax is known to be
// good; a panic in it (Knative guards its webhook the same way) is an
// invalid expression, not a crash.
func parse(expr string) (parsed cesql.Expression, err error) {
	defer func() {
		if r := recover(); r != nil {
			parsed, err = nil, fmt.Errorf("CESQL expression not understood: %v", r)
		}
	}()
	parsed, err = cesqlparser.Parse(expr)
	if err != nil {
		return nil, errors.New(oneLine.Replace(err.Error()))
	}
	return parsed, nil
}

// cesqlNode is a CESQL filter, evaluated as Knative's Trigger evaluates
// its cesql filter: an evaluation error fails it (a missing attribute
// included), and so does a result that does not cast to a boolean.
type cesqlNode struct{ expr cesql.Expression }

func (n cesqlNode) eval(ev *event.Event) result {
	v, err := n.expr.Evaluate(*ev)
	if err != nil {
		return fail
	}
	b, err := utils.Cast(v, cesql.BooleanType)
	if err != nil || !b.(bool) {
		return fail
	}
	return pass
}
